#!/usr/bin/env bash
# Stops the sshd that tests/cluster/sshd_up.sh started and removes its state folder.
set -uo pipefail
state=${TROUPE_SSHD_DIR:-/tmp/troupe-sshd}
[[ -d $state ]] || exit 0
if [[ -s $state/sshd.pid ]]; then
  pid=$(cat "$state/sshd.pid")
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
fi
rm -rf "$state"
