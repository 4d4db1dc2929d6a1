#!/usr/bin/env bash
# Starts a two-node SLURM cluster on this one machine for the launcher tests:
# munged, slurmctld and two slurmd (nodes troupe1 and troupe2), all private to
# a state folder (default /tmp/troupe-slurm, or $TROUPE_SLURM_DIR). Idempotent.
#
#   tests/cluster/slurm_up.sh        installs slurm-wlm and munge if missing
#   export SLURM_CONF=/tmp/troupe-slurm/slurm.conf   then salloc/srun/sbatch
#
# Two slurmd on one host: Debian's Slurm is built without --enable-multiple-slurmd,
# which only forbids two nodes sharing a NodeHostname. So each node gets its own
# NodeHostname (troupe1, troupe2: the names slurmd -N picks) with the same
# NodeAddr 127.0.0.1 and its own Port; %n gives each its spool, pid and log file.
# Exit codes: 0 up; 77 cannot run here (not root, no apt); 1 failed.
set -euo pipefail
state=${TROUPE_SLURM_DIR:-/tmp/troupe-slurm}
ctld_port=${TROUPE_SLURM_PORT:-16817}   # away from Slurm's defaults (6817/6818)
conf="$state/slurm.conf"
export SLURM_CONF="$conf"

skip() { echo "slurm_up: skipped: $*" >&2; exit 77; }
fail() { echo "slurm_up: $*" >&2; for f in "$state"/*.log; do [[ -s $f ]] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done; exit 1; }

[[ $(id -u) -eq 0 ]] || skip "needs root (slurmd starts jobs as their user)"

# --- packages -----------------------------------------------------------------
need=()
for p in slurm-wlm munge; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  command -v apt-get >/dev/null || skip "apt-get is not available to install ${need[*]}"
  echo "slurm_up: installing ${need[*]}" >&2
  apt-get update -qq || skip "apt-get update failed (no network?)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
    skip "apt-get install ${need[*]} failed"
fi

idle_nodes() { sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l; }
alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

if [[ -f $conf ]] && alive "$state/slurmctld.pid" && alive "$state/slurmd.troupe1.pid" &&
   alive "$state/slurmd.troupe2.pid" && [[ $(idle_nodes) -ge 2 ]]; then
  echo "slurm_up: already up ($conf)" >&2
  exit 0
fi
"$(dirname "$0")/slurm_down.sh" >/dev/null 2>&1 || true   # a half-started cluster starts over

mkdir -p "$state" && chmod 0711 "$state"   # munged wants its socket folder traversable
mkdir -p "$state/ctld" "$state/spool.troupe1" "$state/spool.troupe2"

# --- munge: a private daemon, key and socket, so a system munged is left alone --
[[ -s $state/munge.key ]] || { dd if=/dev/urandom of="$state/munge.key" bs=1024 count=1 status=none; chmod 0400 "$state/munge.key"; }
munged --force --socket="$state/munge.socket" --key-file="$state/munge.key" \
  --pid-file="$state/munged.pid" --log-file="$state/munged.log" --seed-file="$state/munged.seed" ||
  fail "munged did not start"

# --- slurm.conf ----------------------------------------------------------------
host=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 4 ))   # MB per node, well under the real total
cat > "$conf" <<CONF
# Written by tests/cluster/slurm_up.sh: two nodes on this machine, for tests.
ClusterName=troupe
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$state/munge.socket
StateSaveLocation=$state/ctld
SlurmctldPidFile=$state/slurmctld.pid
SlurmctldLogFile=$state/slurmctld.log
SlurmdSpoolDir=$state/spool.%n
SlurmdPidFile=$state/slurmd.%n.pid
SlurmdLogFile=$state/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=30
NodeName=troupe1 NodeHostname=troupe1 NodeAddr=127.0.0.1 Port=$((ctld_port + 1)) CPUs=$cpus RealMemory=$mem State=UNKNOWN
NodeName=troupe2 NodeHostname=troupe2 NodeAddr=127.0.0.1 Port=$((ctld_port + 2)) CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=troupe Nodes=troupe1,troupe2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF

# --- daemons ---------------------------------------------------------------------
slurmctld -f "$conf" -i || fail "slurmctld did not start"
for n in troupe1 troupe2; do
  slurmd -f "$conf" -N "$n" || fail "slurmd -N $n did not start"
done

for _ in $(seq 1 60); do
  if [[ $(idle_nodes) -ge 2 ]]; then
    echo "slurm_up: 2 nodes idle; export SLURM_CONF=$conf" >&2
    exit 0
  fi
  sleep 0.5
done
sinfo -N >&2 || true
fail "the nodes did not become idle within 30 s"
