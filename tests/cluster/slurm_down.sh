#!/usr/bin/env bash
# Stops what tests/cluster/slurm_up.sh started (its jobs, then its slurmd,
# slurmctld and munged, found by their pid files in the state folder) and
# removes the folder.
set -uo pipefail
state=${TROUPE_SLURM_DIR:-/tmp/troupe-slurm}
[[ -d $state ]] || exit 0

pids=()
for f in "$state"/slurmd.*.pid "$state"/slurmctld.pid "$state"/munged.pid; do
  [[ -s $f ]] && pids+=("$(cat "$f")")
done
# Jobs first, so no slurmstepd and no task outlives its slurmd.
if [[ -f $state/slurm.conf ]] && [[ -s $state/slurmctld.pid ]] && kill -0 "$(cat "$state/slurmctld.pid")" 2>/dev/null; then
  export SLURM_CONF=$state/slurm.conf
  scancel --partition=troupe 2>/dev/null
  for _ in $(seq 1 100); do
    [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
    sleep 0.1
  done
fi
# Then every daemon at once (each takes 1-2 s to stop): SIGTERM, SIGKILL after 10 s.
((${#pids[@]})) && kill -TERM "${pids[@]}" 2>/dev/null
for _ in $(seq 1 100); do
  alive=0
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
  ((alive)) || break
  sleep 0.1
done
((${#pids[@]})) && kill -KILL "${pids[@]}" 2>/dev/null
rm -rf "$state"
