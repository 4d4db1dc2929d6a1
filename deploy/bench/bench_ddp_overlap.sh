#!/usr/bin/env bash
# Data-parallel gradient sync hidden behind the backward: 2 replicas of the
# main example's model (examples/tiny-gpt.yaml: 4 layers, d_model 128, 867,072
# parameters, 3.47 MB of f32 gradients), one stage each, each replica its own
# node process pinned to one core (`cluster.pin`), an emulated 1 Gbit/s, 1 ms
# link between their all-reduce peers. Three modes, side by side, alternating
# which goes first each round, medians:
#   overlap   buckets reduced as the backward writes them (the default)
#   after     every bucket held until the step's backward is done (`overlap: false`)
#   nocomm    one replica alone on one pinned core, same per-replica batch: the
#             step without any communication
# Hidden share = (after - overlap) / (after - nocomm): of the communication that
# the step pays without overlap, the part the overlap takes off the step. Only
# the communication that fits in the backward after its first bucket can be
# hidden (before that there is nothing to send; after it the optimizer needs
# the result), so a last, traced overlap run measures that window (from each
# step's first `sync` span on a peer to the end of its stage's last backward,
# median over the steps and both replicas), and the share of the hideable part
# is (after - overlap) / min(after - nocomm, window).
#   deploy/bench/bench_ddp_overlap.sh [--rounds N] [--steps N] [--microbatches M] [--bucket SIZE]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
rounds=5 steps=30 mbs=1 bucket=512KB build=build
while (($#)); do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --microbatches) mbs=$2; shift 2 ;;
    --bucket) bucket=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h | --help) echo "usage: $0 [--rounds N] [--steps N] [--microbatches M] [--bucket SIZE] [--build DIR]"; exit 0 ;;
    *) echo "usage: $0 [--rounds N] [--steps N] [--microbatches M] [--bucket SIZE] [--build DIR]" >&2; exit 2 ;;
  esac
done
troupe="$here/$build/deploy/troupe"
[[ -x $troupe ]] || { echo "bench_ddp_overlap: build first ($troupe)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

graph() { # mode
  local replicas=2 nodes=2 dp
  [[ $1 == nocomm ]] && replicas=1 nodes=1
  cat <<YAML
model:    {layers: 4, d_model: 128, heads: 4, context: 64, vocab: 256}
data:     {corpus: $here/data/kjv.txt, batch: 6, seed: 1}
train:    {steps: $steps, lr: 1.0e-3, weight_decay: 0.1, warmup: 100, eval_every: 0}
pipeline: {stages: 1, microbatches: $mbs, schedule: 1f1b}
cluster:  {nodes: $nodes, pin: true}
YAML
  if [[ $1 != nocomm ]]; then
    dp="replicas: 2, bucket: $bucket"
    [[ $1 == after ]] && dp+=", overlap: false"
    cat <<YAML
data_parallel: {$dp}
channels:
  - {from: r0s0_ar, to: r1s0_ar, bandwidth: 1Gbit/s, latency: 1ms}
  - {from: r1s0_ar, to: r0s0_ar, bandwidth: 1Gbit/s, latency: 1ms}
YAML
  fi
}

ms_per_step() { sed -n 's/.*"ms_per_step": *\([0-9.eE+-]*\).*/\1/p' "$1"; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

modes=(overlap after nocomm)
declare -A times
med=()
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $steps steps, $mbs microbatch(es) of 6, bucket $bucket, $rounds rounds"
printf '%-6s %-8s %10s\n' round mode ms/step
for ((r = 1; r <= rounds; r++)); do
  order=("${modes[@]}")
  ((r % 2 == 0)) && order=(nocomm after overlap)
  for m in "${order[@]}"; do
    graph "$m" >"$tmp/$m.yaml"
    (cd "$tmp" && "$troupe" launch "$m.yaml" --no-trace --summary-json "$m.json" >"$m.log" 2>&1) ||
      { cat "$tmp/$m.log" >&2; exit 1; }
    v=$(ms_per_step "$tmp/$m.json")
    times[$m]+="$v "
    printf '%-6d %-8s %10.2f\n' "$r" "$m" "$v"
  done
done
for m in "${modes[@]}"; do
  med[${#med[@]}]=$(printf '%s\n' ${times[$m]} | median)
done
graph overlap >"$tmp/traced.yaml"
(cd "$tmp" && "$troupe" launch traced.yaml --trace "$tmp/t.json" >traced.log 2>&1) || { cat "$tmp/traced.log" >&2; exit 1; }
window=$(python3 - "$tmp"/t.node*.json <<'PY'
import json, statistics, sys
windows = []
for f in sys.argv[1:]:
    t = json.load(open(f))
    ev = t["traceEvents"] if isinstance(t, dict) else t
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
    spans = sorted((e["ts"], e["ts"] + e["dur"], names.get((e["pid"], e["tid"]), ""), e["name"]) for e in ev if e.get("ph") == "X")
    opt = [s for s in spans if s[3].startswith("optimizer") and not s[2].endswith("_ar")]
    for prev, cur in zip(opt, opt[1:]):  # one step: between two optimizer steps of the stage
        inside = [s for s in spans if prev[1] <= s[0] < cur[0]]
        bwd = [s for s in inside if s[3].startswith("backward")]
        sync = [s for s in inside if s[3].startswith("sync") and s[2].endswith("_ar")]
        if bwd and sync:
            windows.append((bwd[-1][1] - sync[0][0]) / 1000)
print(f"{statistics.median(windows):.2f}" if windows else "0")
PY
)
echo
echo "| median ms/step | overlap | after backward | no communication | communication paid | hideable (backward after its first bucket) | hidden of all | hidden of hideable |"
echo "|---|---|---|---|---|---|---|---|"
awk -v o="${med[0]}" -v a="${med[1]}" -v n="${med[2]}" -v w="$window" 'BEGIN {
  c = a - n; h = (w < c) ? w : c
  printf "| %d rounds | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f%% | %.0f%% |\n", '"$rounds"', o, a, n, c, w,
         (c > 0) ? 100 * (a - o) / c : 0, (h > 0) ? 100 * (a - o) / h : 0 }'
echo "(communication the step pays without overlap: $(awk -v a="${med[1]}" -v n="${med[2]}" 'BEGIN {printf "%.2f", a - n}') ms; left with overlap: $(awk -v o="${med[0]}" -v n="${med[2]}" 'BEGIN {printf "%.2f", o - n}') ms)"
