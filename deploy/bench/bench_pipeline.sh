#!/usr/bin/env bash
# Pipeline speedup on this machine: the tiny GPT (config A, 8 microbatches) as
# 1 stage and as 2 stages under 1F1B, runs alternating, median ms/step, against
# the ideal speedup p·m/(m+p−1); plus each stage's runtime overhead (actor time
# outside compute, as the stages report it).
#   deploy/bench/bench_pipeline.sh [RUNS=5] [STEPS=40]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
usage="usage: $0 [RUNS=5] [STEPS=40]"
for a in "$@"; do
  [[ $a == -h || $a == --help ]] && { echo "$usage"; exit 0; }
  [[ $a =~ ^[0-9]+$ ]] || { echo "bench_pipeline: '$a' is not a whole number" >&2; echo "$usage" >&2; exit 2; }
done
runs=${1:-5}
steps=${2:-40}
troupe=${TROUPE:-build/deploy/troupe}
[[ -x $troupe ]] || { echo "bench_pipeline: build first (deploy/dev.sh example builds $troupe)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for ((r = 0; r < runs; ++r)); do
  for p in 1 2; do
    "$troupe" run examples/tiny-gpt.yaml --steps "$steps" --set pipeline.stages=$p --set train.eval_batches=1 \
      --set train.eval_every=0 --trace runs/bench-pipeline.json --summary-json "$out/p$p-$r.json" > "$out/p$p-$r.log"
  done
done

python3 - "$out" "$runs" <<'PY'
import json, re, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
m = 8
ms = {p: [json.load(open(f"{out}/p{p}-{r}.json"))["ms_per_step"] for r in range(runs)] for p in (1, 2)}
over = {p: [float(x) for r in range(runs) for x in re.findall(r"runtime overhead (-?[0-9.]+)%", open(f"{out}/p{p}-{r}.log").read())] for p in (1, 2)}
base = statistics.median(ms[1])
print(f"{'stages':>6} {'ms/step (median)':>17} {'speedup':>8} {'ideal':>6} {'of ideal':>9} {'runtime overhead':>17}")
for p in (1, 2):
    med = statistics.median(ms[p])
    ideal = p * m / (m + p - 1)
    sp = base / med
    print(f"{p:>6} {med:>17.1f} {sp:>8.2f} {ideal:>6.2f} {100 * sp / ideal:>8.1f}% {statistics.median(over[p]):>16.2f}%")
print(f"runs per config: {runs}; all ms/step: " + "; ".join(f"p={p}: " + ", ".join(f"{x:.1f}" for x in ms[p]) for p in (1, 2)))
PY
