#!/usr/bin/env bash
# The simulator against the real runtime on this machine: calibrates a device
# file (`troupe sim --calibrate`), simulates the main example and 1-, 2- and
# 4-stage runs of its model on it (the stages sharing this machine's cores),
# then times the same runs for real (alternating, median of RUNS) and prints
# real vs simulated ms/step and the error, with the load average before and
# after (other work on this machine slows the real runs, not the simulation).
# Every timed step (calibration included) holds /work/bench.lock.
#   deploy/bench/bench_sim_calibrate.sh [RUNS=3] [STEPS=40]
# Environment: TROUPE (the binary), BENCH_LOCK, BENCH_QUIET (cores of other
# work a run may share, default 0.3), BENCH_TRIES (default 3), BENCH_WAIT
# (seconds a run waits for the others to fall under BENCH_QUIET, default 300).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
usage="usage: $0 [RUNS=3] [STEPS=40]"
for a in "$@"; do
  [[ $a == -h || $a == --help ]] && { echo "$usage"; exit 0; }
  [[ $a =~ ^[0-9]+$ ]] || { echo "bench_sim_calibrate: '$a' is not a whole number" >&2; echo "$usage" >&2; exit 2; }
done
runs=${1:-3}
steps=${2:-40}
troupe=${TROUPE:-build/deploy/troupe}
lock=${BENCH_LOCK:-/work/bench.lock}
[[ -x $troupe ]] || { echo "bench_sim_calibrate: build first ($troupe)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Rows: name, then the flags that make the run (the same for `run` and `sim`).
# One validation microbatch at the start and the end (train.eval_batches=1):
# the simulator does not model evaluation, and a short run's two full
# validations would be a few percent of it. The main example is the file as
# it is otherwise (4 stages, 1F1B, traced).
rows=(main p1 p2 p4)
declare -A flags=(
  [main]="--set train.eval_batches=1"
  [p1]="--set pipeline.stages=1 --set train.eval_every=0 --set train.eval_batches=1"
  [p2]="--set pipeline.stages=2 --set train.eval_every=0 --set train.eval_batches=1"
  [p4]="--set pipeline.stages=4 --set train.eval_every=0 --set train.eval_batches=1"
)
declare -A label=([main]="main example (tiny-gpt.yaml)" [p1]="1 stage" [p2]="2 stages" [p4]="4 stages")

# Each timed run (bench_quiet.sh) waits for the other programs on this machine
# to keep under BENCH_QUIET cores busy, and one that shared them with more is
# retried (up to BENCH_TRIES times, the least disturbed kept).
# shellcheck source=deploy/bench/bench_quiet.sh
source "$here/deploy/bench/bench_quiet.sh"

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores; load average before: $load_before"
wait_quiet
flock "$lock" "$troupe" sim --calibrate --out "$tmp/calibrated.yaml" > "$tmp/calibrate.txt"
cat "$tmp/calibrate.txt"

for row in "${rows[@]}"; do
  # shellcheck disable=SC2086  # the flags are words
  "$troupe" sim examples/tiny-gpt.yaml --device "$tmp/calibrated.yaml" ${flags[$row]} --steps 8 --json \
    > "$tmp/sim-$row.json"
done


for ((r = 0; r < runs; ++r)); do
  for row in "${rows[@]}"; do
    trace=(--no-trace)
    [[ $row == main ]] && trace=(--trace "$tmp/main-trace.json")
    # shellcheck disable=SC2086  # the flags are words
    least_disturbed_run "$tmp/run-$row-$r.json" "$troupe" run examples/tiny-gpt.yaml --steps "$steps" \
      ${flags[$row]} "${trace[@]}"
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$tmp" "$runs" "$steps" "$load_before" "$load_after" "${rows[@]}" <<PY
import json, statistics, sys
tmp, runs, steps, before, after, rows = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
label = {$(for row in "${rows[@]}"; do printf '"%s": "%s", ' "$row" "${label[$row]}"; done)}
print(f"{'run':<30} {'real ms/step':>13} {'simulated':>10} {'error':>7}   real runs ({steps} steps each) [cores others used]")
worst = 0
for row in rows:
    real = [json.load(open(f"{tmp}/run-{row}-{r}.json"))["ms_per_step"] for r in range(runs)]
    others = [open(f"{tmp}/run-{row}-{r}.others").read().strip() for r in range(runs)]
    sim = json.load(open(f"{tmp}/sim-{row}.json"))["iteration_s"] * 1000
    med = statistics.median(real)
    err = 100 * (sim - med) / med
    worst = max(worst, abs(err))
    print(f"{label[row]:<30} {med:>13.1f} {sim:>10.1f} {err:>+6.1f}%   " +
          ", ".join(f"{x:.1f} [{o}]" for x, o in zip(real, others)))
print(f"worst error {worst:.1f}%; load average before {before}, after {after} (1, 5, 15 min)")
PY
