#!/usr/bin/env bash
# What global-norm clipping costs a zero-bubble schedule, and what optimizer
# post-validation (`train.clip: post_validate`, #28 item 3) wins back: zb_h1 and
# zbv with no clip (grad_clip 0), synchronous clipping and post_validate.
# 1. `troupe sim` (the same stage cores under the simulated clock): 4 stages x
#    8 microbatches of a 24-layer d_model 1024 GPT on a100_80gb, 8 steps, one
#    stage per node, the links between nodes at LATENCIES (seconds), step time
#    and bubble. The preset prices no optimizer step; AdamW reads and writes
#    about 28 bytes a parameter, 0.015 ns at the A100's 2 TB/s, priced here.
#    Then equal stages (no head, free links), the optimizer about a forward.
# 2. Real runs on this CPU: the tiny GPT on 2 stages x 4 microbatches, runs
#    alternating, median ms/step, the trace's bubble and the rollbacks.
# Writes the tables with the CPU, kernel target and commit to --results.
#   deploy/bench/bench_post_validate.sh [--runs N] [--steps N] [--results FILE]
# Environment: TROUPE (the binary), LATENCIES (default "0 1e-4 1e-3").
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
usage="usage: $0 [--runs N] [--steps N] [--results FILE]"
runs=3 steps=20 results=deploy/results/post_validate.md
while (($#)); do
  case $1 in
    --runs | --steps)
      [[ $# -ge 2 && $2 =~ ^[0-9]+$ && $2 -gt 0 ]] || { echo "bench_post_validate: $1 takes a positive whole number" >&2; echo "$usage" >&2; exit 2; }
      v=${1#--}; printf -v "$v" '%s' "$2"; shift 2 ;;
    --results) [[ $# -ge 2 ]] || { echo "bench_post_validate: --results takes a file" >&2; exit 2; }; results=$2; shift 2 ;;
    -h | --help) echo "$usage"; exit 0 ;;
    *) echo "bench_post_validate: unknown argument '$1'" >&2; echo "$usage" >&2; exit 2 ;;
  esac
done
troupe=${TROUPE:-build/deploy/troupe}
latencies=${LATENCIES:-0 1e-4 1e-3}
[[ -x $troupe ]] || { echo "bench_post_validate: build first ($troupe)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

schedules=(zb_h1 zbv)
clips=(none sync post_validate)
clip_keys() { # clip -> --set arguments
  case $1 in
    none) echo "--set train.grad_clip=0" ;;
    *) echo "--set train.grad_clip=1.0 --set train.clip=$1" ;;
  esac
}
virtual() { [[ $1 == zbv ]] && echo 2 || echo 1; }
simulate() { # graph out schedule clip [more troupe sim arguments]
  local graph=$1 out=$2 s=$3 c=$4
  shift 4
  # shellcheck disable=SC2046
  "$troupe" sim "$graph" --json --set pipeline.schedule="$s" --set pipeline.virtual="$(virtual "$s")" \
    $(clip_keys "$c") "$@" >"$out"
}

cat >"$tmp/sim.yaml" <<'YAML'
model:    {layers: 24, d_model: 1024, heads: 16, context: 1024, vocab: 50304, precision: bf16}
data:     {batch: 1}
train:    {steps: 4}
pipeline: {stages: 4, microbatches: 8, schedule: zb_h1}
devices:  {a100_adamw: {base: a100_80gb, optimizer_ns_per_param: 0.015}}
sim:      {device: a100_adamw, devices_per_node: 1}
YAML
for s in "${schedules[@]}"; do
  for c in "${clips[@]}"; do
    for l in $latencies; do
      simulate "$tmp/sim.yaml" "$tmp/sim-$s-$c-$l.json" "$s" "$c" --steps 8 --set sim.links.between_nodes.latency="$l"
    done
  done
done

# Equal stages (examples/sim/equal_stages.yaml's: no head, free links), AdamW priced.
cat >"$tmp/equal.yaml" <<'YAML'
model:    {layers: 8, d_model: 256, heads: 4, context: 128, vocab: 256, precision: bf16}
data:     {batch: 1}
train:    {steps: 4}
pipeline: {stages: 4, microbatches: 8, schedule: zb_h1}
devices:  {a100_adamw: {base: a100_80gb, optimizer_ns_per_param: 0.2}}
sim:
  device: a100_adamw
  count_head: false
  links: {within_node: {latency: 0, bandwidth: 0}, between_nodes: {latency: 0, bandwidth: 0}}
YAML
for s in "${schedules[@]}"; do
  for c in "${clips[@]}"; do
    simulate "$tmp/equal.yaml" "$tmp/equal-$s-$c.json" "$s" "$c"
  done
done

cat >"$tmp/real.yaml" <<'YAML'
model:    {layers: 4, d_model: 128, heads: 4, context: 64, vocab: 256}
data:     {corpus: kjv, batch: 8, seed: 1}
train:    {steps: 20, lr: 3.0e-3, weight_decay: 0.1, warmup: 2, eval_every: 0, eval_batches: 1, grad_clip: 1.0}
pipeline: {stages: 2, microbatches: 4, schedule: zb_h1}
YAML
for ((r = 0; r < runs; ++r)); do
  for s in "${schedules[@]}"; do
    for c in "${clips[@]}"; do
      base="$tmp/real-$s-$c-$r"
      # shellcheck disable=SC2046
      "$troupe" run "$tmp/real.yaml" --steps "$steps" --set pipeline.schedule="$s" \
        --set pipeline.virtual="$(virtual "$s")" $(clip_keys "$c") --trace "$base.trace.json" \
        --summary-json "$base.json" >"$base.log"
      "$troupe" trace summarize "$base.trace.json" --json --no-order >"$base.summary.json"
    done
  done
done

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!deploy/results' || echo '+changes')"
mkdir -p "$(dirname "$results")"
python3 - "$tmp" "$runs" "$steps" "$cpu" "$(nproc)" "$commit" "$(cut -d' ' -f1-3 /proc/loadavg)" "$latencies" <<'PY' | tee "$results"
import json, statistics, sys, datetime
tmp, runs, steps, cpu, cores, commit, load, latencies = sys.argv[1:9]
runs, latencies = int(runs), latencies.split()
schedules, clips = ["zb_h1", "zbv"], ["none", "sync", "post_validate"]
first = json.load(open(f"{tmp}/real-zb_h1-none-0.json"))
print("# Global-norm clipping under zero-bubble schedules: none, sync, post_validate\n")
print(f"`deploy/bench/bench_post_validate.sh --runs {runs} --steps {steps}` (#28 item 3).\n")
print(f"- machine: {cpu}, {cores} cores, load (1, 5, 15 min) {load}; kernel target {first.get('kernel_target')}, "
      f"BLAS core {first.get('blas_core')}")
print(f"- commit {commit}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC\n")
print("## Simulated: 4 stages x 8 microbatches, 24 layers d_model 1024 on a100_80gb (AdamW at 0.015 ns a "
      "parameter), a stage per node, 8 steps\n")
print("Step time in ms (bubble fraction) by the latency of the links between nodes.\n")
print("| schedule | clip | " + " | ".join(f"latency {l} s" for l in latencies) + " |")
print("|---|---|" + "---|" * len(latencies))
for s in schedules:
    for c in clips:
        cells = []
        for l in latencies:
            j = json.load(open(f"{tmp}/sim-{s}-{c}-{l}.json"))
            cells.append(f"{1e3 * j['iteration_s']:.3f} ({j['bubble']:.4f})")
        print(f"| {s} | {c} | " + " | ".join(cells) + " |")
print("\n## Simulated: equal stages (4 x 8 microbatches, 2 layers d_model 256 each, no head, free links; "
      "AdamW at 0.2 ns a parameter)\n")
print("| schedule | clip | step time us | bubble |")
print("|---|---|---|---|")
for s in schedules:
    for c in clips:
        j = json.load(open(f"{tmp}/equal-{s}-{c}.json"))
        print(f"| {s} | {c} | {1e6 * j['iteration_s']:.3f} | {j['bubble']:.4f} |")
print(f"\n## Real: the tiny GPT (4 layers, d_model 128) on 2 stages x 4 microbatches, {steps} steps, this CPU\n")
print("Runs alternate; ms/step and the trace's bubble fraction are medians over the runs; rollbacks: steps "
      "post-validation rolled back and redid clipped (grad_clip 1.0, lr 3e-3).\n")
print("| schedule | clip | ms/step (median) | each run | bubble (median) | rollbacks | final loss |")
print("|---|---|---|---|---|---|---|")
for s in schedules:
    for c in clips:
        js = [json.load(open(f"{tmp}/real-{s}-{c}-{r}.json")) for r in range(runs)]
        bs = [json.load(open(f"{tmp}/real-{s}-{c}-{r}.summary.json"))["bubble_fraction"] for r in range(runs)]
        ms = [j["ms_per_step"] for j in js]
        print(f"| {s} | {c} | {statistics.median(ms):.1f} | {', '.join(f'{x:.1f}' for x in ms)} | "
              f"{statistics.median(bs):.3f} | {js[0].get('rollbacks', 0)} | {js[0]['train_loss']:.6f} |")
PY
