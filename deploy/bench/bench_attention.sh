#!/usr/bin/env bash
# Core attention on attention servers (DistCA, #15), measured for real: 2 replicas
# of a 1-stage model, each its own node process pinned to one core, documents from
# the long-tail law dealt heaviest first (replica 0 draws the long ones). Colocated
# attention against attention servers in place (each replica's stage serves the
# other), runs alternating; the step time is the mean of steps 2..N from replica 0's
# optimizer spans (the first step and the validation passes left out), the median
# over runs; and the pairs per server, max/avg, before and after planning.
#   deploy/bench/bench_attention.sh [RUNS=5] [STEPS=10] [NANO=2] [BATCH=4] [CONTEXT=2048]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
runs=${1:-5}
steps=${2:-10}
nano=${3:-2}
batch=${4:-4}
context=${5:-2048}
troupe=${TROUPE:-build/deploy/troupe}
[[ -x $troupe ]] || { echo "bench_attention: build first ($troupe)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

graph() { # attention section or nothing
  cat <<YAML
model:    {layers: 2, d_model: 64, heads: 4, context: $context, vocab: 256}
data:     {corpus: kjv, batch: $batch, seed: 1, documents: long_tail, deal: heaviest_first}
train:    {steps: $steps, lr: 1.0e-3, warmup: 2, eval_batches: 1}
pipeline: {stages: 1, microbatches: 1, schedule: 1f1b}
data_parallel: {replicas: 2}
cluster:  {nodes: 2, pin: true}
$1
YAML
}

graph "" > "$out/colocated.yaml"
graph "attention: {servers: in_place, nano_batches: $nano}" > "$out/in_place.yaml"
for ((i = 0; i < runs; ++i)); do
  for kind in colocated in_place; do
    "$troupe" launch "$out/$kind.yaml" --trace "$out/$kind-$i.json" --summary-json "$out/$kind-$i.sum.json" \
      > "$out/$kind-$i.log" 2>&1 || { cat "$out/$kind-$i.log" >&2; exit 1; }
    echo "bench_attention: run $((i + 1))/$runs $kind done" >&2
  done
done

python3 - "$out" "$runs" "$nano" "$batch" "$context" <<'PY'
import glob, json, re, statistics, sys
out, runs, nano, batch, context = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]

def steps_ms(path):
    """Replica 0's step times (ms) between consecutive optimizer spans, the first step left out."""
    t = json.load(open(path))
    ev = t["traceEvents"] if isinstance(t, dict) else t
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
    ts = sorted(e["ts"] for e in ev if e.get("ph") == "X" and e.get("cat") == "optimizer"
                and names.get((e["pid"], e["tid"])) == "r0s0")
    return [(b - a) / 1e3 for a, b in zip(ts, ts[1:])]

def node0(kind, i):
    return glob.glob(f"{out}/{kind}-{i}.node0.json")[0]

rows = {}
for kind in ("colocated", "in_place"):
    per_run = [statistics.mean(steps_ms(node0(kind, i))) for i in range(runs)]
    losses = json.load(open(f"{out}/{kind}-0.sum.json"))["losses"]
    rows[kind] = (statistics.median(per_run), per_run, losses[-1])
bal = re.search(r"max/avg ([0-9.]+) at home, ([0-9.]+) as planned", open(f"{out}/in_place-0.log").read())
print(f"2 replicas x 1 stage (2 layers, d_model 64, context {context}, batch {batch}), each on its own node process")
print(f"pinned to one core; long-tail documents, heaviest sequences to replica 0; nano_batches {nano}; {runs} runs")
print(f"{'attention':<10} {'step ms (median)':>17} {'runs':>24} {'last loss':>10}")
for kind, (med, per_run, loss) in rows.items():
    print(f"{kind:<10} {med:>17.1f} {' '.join(f'{x:.1f}' for x in per_run):>24} {loss:>10.6f}")
print(f"speedup (colocated / in place): {rows['colocated'][0] / rows['in_place'][0]:.3f}x")
if bal:
    print(f"attention pairs per server, max/avg: {bal.group(1)} at home, {bal.group(2)} as planned")
PY
