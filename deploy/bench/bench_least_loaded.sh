#!/usr/bin/env bash
# Routing around a straggler in a real run: 4 replicas of a 2-stage 1F1B
# pipeline, every stage an emulated slow device (`slowdown: S`, the action's
# compute then sleep, so 8 "devices" fit on this machine's 2 cores), one of them
# (r1s1) twice as slow (2S). Throughput of `own` and `least_loaded` routing,
# with and without the straggler, runs alternating, medians, as a share of the
# unslowed `own` run; and each run's last loss (the same for both routes).
# The first position's stages may hold 4 activations (see schedulers/routing/least_loaded.test.cpp).
#   deploy/bench/bench_least_loaded.sh [RUNS=3] [STEPS=6] [S=6] [MICROBATCHES=16]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
usage="usage: $0 [RUNS=3] [STEPS=6] [S=6] [MICROBATCHES=16]"
for a in "$@"; do
  [[ $a == -h || $a == --help ]] && { echo "$usage"; exit 0; }
  [[ $a =~ ^[0-9]+$ ]] || { echo "bench_least_loaded: '$a' is not a whole number" >&2; echo "$usage" >&2; exit 2; }
done
runs=${1:-3}
steps=${2:-6}
slow=${3:-6}
mbs=${4:-16}
troupe=${TROUPE:-build/deploy/troupe}
[[ -x $troupe ]] || { echo "bench_least_loaded: build first ($troupe)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

graph() { # route, factor of r1s1
  cat <<YAML
model:    {layers: 4, d_model: 128, heads: 4, context: 64, vocab: 256}
data:     {corpus: kjv, batch: 4, seed: 3}
train:    {steps: $steps, lr: 1.0e-3, warmup: 2, eval_batches: 1}
pipeline: {stages: 2, microbatches: $mbs, schedule: 1f1b}
data_parallel: {replicas: 4, bucket: 4MB, route: $1}
actors:
YAML
  for r in 0 1 2 3; do
    echo "  - {name: r${r}s0, slowdown: $slow, policy: {max_in_flight: 4}}"
    if [[ $r == 1 ]]; then echo "  - {name: r1s1, slowdown: $2}"; else echo "  - {name: r${r}s1, slowdown: $slow}"; fi
  done
}

twice=$(python3 -c "print(2 * $slow)")
for ((i = 0; i < runs; ++i)); do
  for route in own least_loaded; do
    for slowed in 0 1; do
      f=$slow; [[ $slowed == 1 ]] && f=$twice
      graph $route "$f" > "$out/g.yaml"
      "$troupe" run "$out/g.yaml" --no-trace --threads 12 --summary-json "$out/$route-$slowed-$i.json" \
        > "$out/$route-$slowed-$i.log" 2>&1
    done
  done
done

python3 - "$out" "$runs" "$slow" <<'PY'
import json, statistics, sys
out, runs, slow = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(route, slowed):
    return [json.load(open(f"{out}/{route}-{slowed}-{i}.json")) for i in range(runs)]
base = statistics.median(j["tokens_per_s"] for j in load("own", 0))
print(f"4 replicas x 2 stages, every stage slowdown {slow}, r1s1 2x that when slowed; medians of {runs} runs")
print(f"{'route':<13} {'r1s1':>6} {'tokens/s':>9} {'ms/step':>8} {'of own unslowed':>16} {'last loss':>10}")
for route in ("own", "least_loaded"):
    for slowed in (0, 1):
        js = load(route, slowed)
        tps = statistics.median(j["tokens_per_s"] for j in js)
        ms = statistics.median(j["ms_per_step"] for j in js)
        print(f"{route:<13} {'2x' if slowed else '1x':>6} {tps:>9.0f} {ms:>8.1f} {100 * tps / base:>15.1f}% {js[0]['losses'][-1]:>10.6f}")
PY
