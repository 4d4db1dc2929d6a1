#!/usr/bin/env bash
# Stops what tests/cluster/slurm_up.sh started (its slurmd, slurmctld and
# munged, found by their pid files in the state folder) and removes the folder.
set -uo pipefail
state=${TROUPE_SLURM_DIR:-/tmp/troupe-slurm}
[[ -d $state ]] || exit 0

stop() { # stop PIDFILE: SIGTERM, then SIGKILL after 10 s
  [[ -s $1 ]] || return 0
  local pid; pid=$(cat "$1")
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
}
# Jobs first, so no slurmstepd and no task outlives its slurmd.
if [[ -f $state/slurm.conf ]] && [[ -s $state/slurmctld.pid ]] && kill -0 "$(cat "$state/slurmctld.pid")" 2>/dev/null; then
  export SLURM_CONF=$state/slurm.conf
  scancel --partition=troupe 2>/dev/null
  for _ in $(seq 1 100); do
    [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
    sleep 0.1
  done
fi
for f in "$state"/slurmd.*.pid; do stop "$f"; done
stop "$state/slurmctld.pid"
stop "$state/munged.pid"
rm -rf "$state"
