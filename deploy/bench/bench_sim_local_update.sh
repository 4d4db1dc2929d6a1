#!/usr/bin/env bash
# `troupe sim` against a real local-update run (#25 item 6): 2 replicas of the
# main example's model (4 layers, d_model 128; 2 pipeline stages each), one
# replica per node process (`troupe launch`, cluster.pin: each process on a core
# of its own), the outer_sync links of every position emulated at 10 Mbit/s and
# 50 ms. Calibrates a device file at the graph's sizes on one core (`troupe sim
# --calibrate --cores 1`), simulates each graph with it, then launches it for
# real RUNS times (the methods alternating) and prints the training time (from
# the start to the last actor's done: the summary's ms_per_step x steps) real
# (median) against simulated, their ratio, and the outer bytes of each; and
# what each DiLoCo exchange adds to the run, real against simulated. Writes
# the table with the CPU, load and commit to --results.
#   deploy/bench/bench_sim_local_update.sh [--runs N] [--steps N] [--sync-every H] [--results FILE]
# Environment: TROUPE (the binary), BENCH_LOCK (held around every timed step,
# default /work/bench.lock), BENCH_QUIET, BENCH_TRIES, BENCH_WAIT (bench_quiet.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
usage="usage: $0 [--runs N] [--steps N] [--sync-every H] [--results FILE]"
runs=3 steps=40 sync_every=10 results=deploy/results/sim_local_update_10mbit.md
while (($#)); do
  case $1 in
    --runs | --steps | --sync-every)
      [[ $# -ge 2 && $2 =~ ^[0-9]+$ && $2 -gt 0 ]] || { echo "bench_sim_local_update: $1 takes a positive whole number" >&2; echo "$usage" >&2; exit 2; }
      v=${1#--}; printf -v "${v//-/_}" '%s' "$2"; shift 2 ;;
    --results) [[ $# -ge 2 ]] || { echo "bench_sim_local_update: --results takes a file" >&2; exit 2; }; results=$2; shift 2 ;;
    -h | --help) echo "$usage"; exit 0 ;;
    *) echo "bench_sim_local_update: unknown argument '$1'" >&2; echo "$usage" >&2; exit 2 ;;
  esac
done
troupe=${TROUPE:-build/deploy/troupe}
lock=${BENCH_LOCK:-/work/bench.lock}
[[ -x $troupe ]] || { echo "bench_sim_local_update: build first ($troupe)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
H=$sync_every
# Each real run waits for the other programs on this machine to keep under
# BENCH_QUIET cores busy, and one that shared them with more is retried (up
# to BENCH_TRIES times, the least disturbed kept); the table says how busy.
# shellcheck source=deploy/bench/bench_quiet.sh
source "$here/deploy/bench/bench_quiet.sh"

# Rows: name, the local_update line.
# diloco_once exchanges once, after the last step: what diloco's other
# exchanges add to it is their cost on the critical path, the load's effect on
# the compute (which calibration cannot foresee) taken out.
rows=(diloco diloco_once streaming)
declare -A method=(
  [diloco]="{algorithm: diloco, sync_every: $H}"
  [diloco_once]="{algorithm: diloco, sync_every: $steps}"
  [streaming]="{algorithm: streaming_diloco, sync_every: $H, fragments: 2, delay: 1, quantize: int8}"
)
graph() { # row
  cat <<YAML
model:    {layers: 4, d_model: 128, heads: 4, context: 64, vocab: 256}
data:     {corpus: kjv, batch: 6, seed: 3}
train:    {steps: $steps, lr: 1.0e-3, weight_decay: 0.1, warmup: 10, eval_every: 0, eval_batches: 1}
pipeline: {stages: 2, microbatches: 2, schedule: 1f1b}
data_parallel: {replicas: 2}
local_update: ${method[$1]}
cluster:  {launcher: local, nodes: 2, pin: true}
channels:
YAML
  for s in 0 1; do
    echo "  - {from: r0s${s}_sync, to: r1s${s}_sync, bandwidth: 10Mbit/s, latency: 50ms}"
    echo "  - {from: r1s${s}_sync, to: r0s${s}_sync, bandwidth: 10Mbit/s, latency: 50ms}"
  done
}
field() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); [j := j[k] for k in sys.argv[2:]]; print(j)" "$@"; }

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!deploy/results' || echo '+changes')"
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores, load $load_before; commit $commit" >&2

for row in "${rows[@]}"; do graph "$row" >"$tmp/$row.yaml"; done
wait_quiet
flock "$lock" "$troupe" sim --calibrate "$tmp/diloco.yaml" --cores 1 --out "$tmp/calibrated.yaml" >"$tmp/calibrate.txt"
for row in "${rows[@]}"; do
  "$troupe" sim "$tmp/$row.yaml" --device "$tmp/calibrated.yaml" --steps "$steps" --json >"$tmp/sim-$row.json"
done
for ((r = 0; r < runs; ++r)); do
  for row in "${rows[@]}"; do
    out="$tmp/run-$row-$r.json"
    least_disturbed_run "$out" timeout 900 "$troupe" launch "$tmp/$row.yaml" --no-trace
    echo "$row, run $((r + 1)): $(field "$out" ms_per_step) ms/step, other programs kept $(cat "$out.others") cores busy" >&2
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

mkdir -p "$(dirname "$results")"
python3 - "$tmp" "$runs" "$steps" "$H" "$cpu" "$(nproc)" "$commit" "$load_before" "$load_after" "${rows[@]}" <<'PY' | tee "$results"
import json, statistics, sys, datetime
tmp, runs, steps, H, cpu, cores, commit, before, after = sys.argv[1:10]
rows, runs, steps = sys.argv[10:], int(runs), int(steps)
print("# `troupe sim` against real local-update runs over 10 Mbit/s links\n")
print(f"`deploy/bench/bench_sim_local_update.sh --runs {runs} --steps {steps} --sync-every {H}` (#25 item 6): 2 replicas x 2 "
      "stages of the main example's model, a replica per node process (`troupe launch`, pinned to a core each), "
      "outer_sync links emulated at 10 Mbit/s and 50 ms; the simulation on a device file calibrated on one core "
      "of this machine. Training time: from the start to the last actor's done (real: median of the runs).\n")
print(f"- machine: {cpu}, {cores} cores; load (1, 5, 15 min) {before} before, {after} after")
print(f"- commit {commit}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC\n")
print("| method | real s (median) | real s, each run [cores other programs used] | simulated s | simulated / real | outer steps | real bytes, r0 outer_syncs | simulated |")
print("|---|---|---|---|---|---|---|---|")
worst = 0
for row in rows:
    sim = json.load(open(f"{tmp}/sim-{row}.json"))
    real = [json.load(open(f"{tmp}/run-{row}-{r}.json")) for r in range(runs)]
    secs = [j["ms_per_step"] * steps / 1000 for j in real]
    others = [open(f"{tmp}/run-{row}-{r}.json.others").read().strip() for r in range(runs)]
    med = statistics.median(secs)
    simulated = sim["iteration_s"] * steps
    ratio = simulated / med
    worst = max(worst, abs(ratio - 1))
    lu = sim["local_update"]
    rb = sum(v for k, v in real[0]["bytes_sent"].items() if k.startswith("r0") and k.endswith("_sync"))
    sb = sum(v for k, v in lu["bytes_by_actor"].items() if k.startswith("r0"))
    print(f"| {row} | {med:.2f} | {', '.join(f'{s:.2f} [{o}]' for s, o in zip(secs, others))} | {simulated:.2f} | {ratio:.3f} | "
          f"{lu['exchanges']} | {rb:,.0f} | {sb:,.0f} |")
print(f"\nworst |simulated / real - 1|: {100 * worst:.1f}%")
if "diloco" in rows and "diloco_once" in rows:
    def total(row, r=None):
        if r is None:
            return json.load(open(f"{tmp}/sim-{row}.json"))["iteration_s"] * steps
        return json.load(open(f"{tmp}/run-{row}-{r}.json"))["ms_per_step"] * steps / 1000
    n = json.load(open(f"{tmp}/sim-diloco.json"))["local_update"]["exchanges"] - 1
    real = [(total("diloco", r) - total("diloco_once", r)) / n for r in range(runs)]
    sim = (total("diloco") - total("diloco_once")) / n
    med = statistics.median(real)
    print(f"\nWhat each of diloco's {n} exchanges before the last adds to the run (diloco less diloco_once, run by run): "
          f"real {med:.3f} s (median; {', '.join(f'{x:.3f}' for x in real)}), simulated {sim:.3f} s, "
          f"simulated / real {sim / med:.3f}")
PY
