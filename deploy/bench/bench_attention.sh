#!/usr/bin/env bash
# Core attention on attention servers (DistCA, #15, #24), measured for real: 2
# replicas of a 1-stage model, each its own node process pinned to one core,
# documents from the long-tail law, dealt two ways: heaviest first (the
# adversarial deal: replica 0 draws the long ones, DistCA's straggler) and in
# order (the corpus's order, what a loader does unless told otherwise).
# Colocated attention against attention servers in place (each replica's stage
# serves the other), for each deal; every round runs all four, the order rotated
# round by round. The step time is the mean of steps 2..N from replica 0's
# optimizer spans (the first step and the validation passes left out), the
# median over rounds; and the pairs per server, max/avg, before and after
# planning. Writes the table with the CPU, kernel target, load before and after,
# commit and the rounds run to --results.
#   deploy/bench/bench_attention.sh [--rounds N] [--steps N] [--nano N] [--batch N] [--context N] [--results FILE]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
usage="usage: $0 [--rounds N (>= 3)] [--steps N] [--nano N] [--batch N] [--context N] [--results FILE]"
rounds=5 steps=10 nano=2 batch=4 context=2048 results=""
while (($#)); do
  case $1 in
    --rounds | --steps | --nano | --batch | --context)
      [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || { echo "bench_attention: $1 takes a whole number" >&2; echo "$usage" >&2; exit 2; }
      printf -v "${1#--}" '%s' "$2"; shift 2 ;;
    --results)
      [[ $# -ge 2 ]] || { echo "bench_attention: $1 takes a value" >&2; exit 2; }
      results=$2; shift 2 ;;
    -h | --help) echo "$usage"; exit 0 ;;
    *) echo "bench_attention: unknown argument '$1'" >&2; echo "$usage" >&2; exit 2 ;;
  esac
done
((rounds >= 3)) || { echo "bench_attention: at least 3 rounds (medians of fewer mean little)" >&2; exit 2; }
((steps >= 3)) || { echo "bench_attention: at least 3 steps (the first is left out)" >&2; exit 2; }
troupe=${TROUPE:-build/deploy/troupe}
[[ -x $troupe ]] || { echo "bench_attention: build first ($troupe)" >&2; exit 2; }
results=${results:-deploy/results/attention_servers_ctx${context}_b${batch}_nano${nano}.md}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

graph() { # deal, attention section or nothing
  cat <<YAML
model:    {layers: 2, d_model: 64, heads: 4, context: $context, vocab: 256}
data:     {corpus: kjv, batch: $batch, seed: 1, documents: long_tail, deal: $1}
train:    {steps: $steps, lr: 1.0e-3, warmup: 2, eval_batches: 1}
pipeline: {stages: 1, microbatches: 1, schedule: 1f1b}
data_parallel: {replicas: 2}
cluster:  {nodes: 2, pin: true}
$2
YAML
}

kinds=(heaviest_first.colocated heaviest_first.in_place in_order.colocated in_order.in_place)
for kind in "${kinds[@]}"; do
  deal=${kind%%.*}
  if [[ $kind == *.colocated ]]; then
    graph "$deal" "" >"$out/$kind.yaml"
  else
    graph "$deal" "attention: {servers: in_place, nano_batches: $nano}" >"$out/$kind.yaml"
  fi
done
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!deploy/results' || echo '+changes')"
kernel=$("$troupe" check "$out/${kinds[0]}.yaml" --json | python3 -c "import json,sys; print(json.load(sys.stdin).get('kernel_target', '?'))")
n=${#kinds[@]}
repeated=0  # runs lost to a node that missed its heartbeats (4 s) on a loaded machine, run again
for ((r = 1; r <= rounds; r++)); do
  for ((i = 0; i < n; i++)); do  # round r starts (r - 1) places further along the list
    kind=${kinds[$(((i + r - 1) % n))]}
    for try in 1 2 3; do
      "$troupe" launch "$out/$kind.yaml" --trace "$out/$kind-$r.json" --summary-json "$out/$kind-$r.sum.json" \
        >"$out/$kind-$r.log" 2>&1 && break
      grep -q "no heartbeat" "$out/$kind-$r.log" && ((try < 3)) || { cat "$out/$kind-$r.log" >&2; exit 1; }
      ((++repeated))
      echo "bench_attention: round $r $kind lost a node to the load, running it again" >&2
    done
    echo "bench_attention: round $r/$rounds $kind done" >&2
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$out" "$rounds" "$results" "${kinds[@]}" <<PY
import glob, json, re, statistics, sys
out, rounds, results, kinds = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]

def steps_ms(path):
    """Replica 0's step times (ms) between consecutive optimizer spans, the first step left out."""
    t = json.load(open(path))
    ev = t["traceEvents"] if isinstance(t, dict) else t
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
    ts = sorted(e["ts"] for e in ev if e.get("ph") == "X" and e.get("cat") == "optimizer"
                and names.get((e["pid"], e["tid"])) == "r0s0")
    return [(b - a) / 1e3 for a, b in zip(ts, ts[1:])]

rows = {}
for kind in kinds:
    per_round = [statistics.mean(steps_ms(glob.glob(f"{out}/{kind}-{r}.node0.json")[0])) for r in range(1, rounds + 1)]
    losses = json.load(open(f"{out}/{kind}-1.sum.json"))["losses"]
    rows[kind] = (statistics.median(per_round), per_round, losses[-1])
L = []
w = L.append
w("# Attention servers against colocated attention, real runs")
w("")
w("\`deploy/bench/bench_attention.sh\` (#15, #24): 2 replicas x 1 stage (2 layers, d_model 64, context $context, batch $batch),")
w("each its own node process pinned to one core; long-tail documents; servers in place with nano_batches $nano; $steps")
w("steps per run. Each of the four configurations ran once in each of $rounds rounds (order rotated each round); step")
w("time is the mean of steps 2..$steps of replica 0 (optimizer spans), the median over rounds.")
w("")
w("- machine: ${cpu:-unknown CPU}, $(nproc) cores; kernel target $kernel")
w("- load (1, 5, 15 min): $load_before before, $load_after after")
w("- commit $commit, $(date -u '+%F %H:%M UTC')")
w(f"- rounds run: {rounds} of each configuration; runs repeated because a node missed its heartbeats under the load: $repeated")
w("")
w("| deal | colocated ms/step | each round | in place ms/step | each round | speedup (colocated / in place) | pairs per server max/avg, at home -> planned | last loss colocated / in place |")
w("|---|---|---|---|---|---|---|---|")
for deal, label in (("heaviest_first", "heaviest first (adversarial)"), ("in_order", "in order (ordinary)")):
    c, p = rows[f"{deal}.colocated"], rows[f"{deal}.in_place"]
    bal = re.search(r"max/avg ([0-9.]+) at home, ([0-9.]+) as planned", open(f"{out}/{deal}.in_place-1.log").read())
    w(f"| {label} | {c[0]:.1f} | {' '.join(f'{x:.1f}' for x in c[1])} | {p[0]:.1f} | {' '.join(f'{x:.1f}' for x in p[1])} | "
      f"{c[0] / p[0]:.3f}x | {bal.group(1) + ' -> ' + bal.group(2) if bal else '-'} | {c[2]:.6f} / {p[2]:.6f} |")
text = "\n".join(L) + "\n"
open(results, "w").write(text)
print(text)
PY
