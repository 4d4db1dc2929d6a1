#!/usr/bin/env bash
# SkipPipe against the full pipeline in real runs (#14, #24): examples/skippipe-run.yaml,
# 6 stage positions x 2 data-parallel replicas of a 12-layer, d_model-64 model,
# one stage actor per region of the geo12 preset, every channel between two
# stages (and between their all-reduce peers) emulating the link between their
# regions. Same placement, same tokens, same validation batches; only the paths
# differ. A real run does not bound what a node holds: under gpipe a node past
# stage 0 holds every microbatch its plan sends it until their backwards. So the
# plans are compared under the same node memory bound, in two pairs:
#   held (skip.memory M, 3 in the example: no node past stage 0 serves more than M
#   microbatches an iteration, so none holds more):
#     skippipe     the plan: each microbatch visits L of the 6 positions
#     full         the best full pipeline the same planner finds under the same
#                  rules: L = 6, no swaps, no jumps (every position in order, the
#                  chains planned, each node at most M microbatches)
#     chains       every position in order, each replica on its own chain (DT-FM's
#                  fixed chains: what a plain pipeline with data parallelism routes)
#   not held (skip.memory = every microbatch of the step, on both sides):
#     skippipe_all the plan with no memory bound (stage capacity still --max-per-stage)
#     full_all     skip.planner: full, chains planned, no memory bound
# Each plan's largest count on one node is printed beside it (from `troupe plan
# paths --json`), so the table shows the bound held or not. Every configuration
# runs --rounds times, all of them in each round, the order rotated round by
# round; ms/step and validation loss are medians. Writes the table with the CPU,
# kernel target, load before and after, commit and the rounds run to --results.
#   deploy/bench/bench_skippipe.sh [--rounds N] [--steps N] [--max-per-stage K] [--results FILE] [--build DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
usage="usage: $0 [--rounds N (>= 3)] [--steps N] [--max-per-stage K] [--results FILE] [--build DIR]"
rounds=3 steps=60 per_stage=4 build=build results=""
while (($#)); do
  case $1 in
    --rounds | --steps | --max-per-stage)
      [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || { echo "bench_skippipe: $1 takes a whole number" >&2; echo "$usage" >&2; exit 2; }
      case $1 in --rounds) rounds=$2 ;; --steps) steps=$2 ;; *) per_stage=$2 ;; esac; shift 2 ;;
    --results | --build)
      [[ $# -ge 2 ]] || { echo "bench_skippipe: $1 takes a value" >&2; exit 2; }
      [[ $1 == --results ]] && results=$2 || build=$2; shift 2 ;;
    -h | --help) echo "$usage"; exit 0 ;;
    *) echo "bench_skippipe: unknown argument '$1'" >&2; echo "$usage" >&2; exit 2 ;;
  esac
done
((rounds >= 3)) || { echo "bench_skippipe: at least 3 rounds (medians of fewer mean little)" >&2; exit 2; }
troupe="$here/$build/deploy/troupe"
[[ -x $troupe ]] || { echo "bench_skippipe: build first ($troupe)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
graph=examples/skippipe-run.yaml
results=${results:-deploy/results/skippipe_geo12_${steps}steps.md}
# max_per_stage 4 spreads the 18 visits of a step over all 5 positions past stage
# 0 (with 6, the plan leaves a position untrained and its full model is worse).
common=(--set "train.steps=$steps")
memory=$(sed -n 's/^ *memory: *\([0-9]*\).*/\1/p' "$graph" | head -1)
stages=$(sed -n 's/^pipeline: *{stages: *\([0-9]*\).*/\1/p' "$graph")
microbatches=$(sed -n 's/^pipeline:.*microbatches: *\([0-9]*\).*/\1/p' "$graph" | head -1)
replicas=$(sed -n 's/^data_parallel:.*replicas: *\([0-9]*\).*/\1/p' "$graph" | head -1)
agents=$((${microbatches:-0} * ${replicas:-0}))
[[ -n $memory && -n $stages && $agents -gt 0 ]] || { echo "bench_skippipe: cannot read memory, stages and microbatches from $graph" >&2; exit 2; }
modes=(skippipe full chains skippipe_all full_all)
declare -A sets
sets[skippipe]="skip.planner=skippipe skip.max_per_stage=$per_stage"
sets[full]="skip.planner=skippipe skip.path_length=$stages skip.swaps=0 skip.max_jump=1 skip.max_per_stage=$agents"
sets[chains]="skip.planner=chains"
sets[skippipe_all]="skip.planner=skippipe skip.max_per_stage=$per_stage skip.memory=$agents"
sets[full_all]="skip.planner=full skip.memory=$agents"
args() { local kv; for kv in ${sets[$1]}; do printf '%s\n' --set "$kv"; done; }

field() { python3 -c "import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2]); print('nan' if v is None else v)" "$1" "$2"; }

declare -A plan most
for m in "${modes[@]}"; do
  mapfile -t a < <(args "$m")
  "$troupe" plan paths "$graph" "${common[@]}" "${a[@]}" --json >"$tmp/$m.plan.json" 2>"$tmp/$m.plan.err" ||
    { echo "bench_skippipe: no plan for $m:" >&2; cat "$tmp/$m.plan.err" >&2; exit 1; }
  read -r plan[$m] most[$m] < <(python3 - "$tmp/$m.plan.json" <<'PY'
import collections, json, sys
p = json.load(open(sys.argv[1]))
stage0 = set(p["placement"][0])
count = collections.Counter(n for path in p["paths"] for n in set(path["nodes"]) if n not in stage0)
print(p["time"]["planned"], max(count.values()))
PY
  )
done
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!deploy/results' || echo '+changes')"
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores, load $load_before; $graph, $steps steps, memory $memory, max_per_stage $per_stage, $rounds rounds" >&2
n=${#modes[@]}
: >"$tmp/rounds.tsv"
for ((r = 1; r <= rounds; r++)); do
  for ((i = 0; i < n; i++)); do  # round r starts (r - 1) places further along the list
    m=${modes[$(((i + r - 1) % n))]}
    mapfile -t a < <(args "$m")
    "$troupe" run "$graph" "${common[@]}" "${a[@]}" --no-trace --summary-json "$tmp/$m.$r.json" \
      >"$tmp/$m.$r.log" 2>&1 || { cat "$tmp/$m.$r.log" >&2; exit 1; }
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$m" "$(field "$tmp/$m.$r.json" ms_per_step)" "$(field "$tmp/$m.$r.json" val_loss)" \
      "$(field "$tmp/$m.$r.json" val_loss_short)" "$(field "$tmp/$m.$r.json" kernel_target)" | tee -a "$tmp/rounds.tsv" >&2
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$tmp/rounds.tsv" "$results" "${modes[@]}" <<PY
import statistics, sys
path, results, modes = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = [l.rstrip("\n").split("\t") for l in open(path)]
plan = dict(skippipe="${plan[skippipe]}", full="${plan[full]}", chains="${plan[chains]}",
            skippipe_all="${plan[skippipe_all]}", full_all="${plan[full_all]}")
most = dict(skippipe="${most[skippipe]}", full="${most[full]}", chains="${most[chains]}",
            skippipe_all="${most[skippipe_all]}", full_all="${most[full_all]}")
sets = dict(skippipe="${sets[skippipe]}", full="${sets[full]}", chains="${sets[chains]}",
            skippipe_all="${sets[skippipe_all]}", full_all="${sets[full_all]}")
kernel = rows[0][5] if rows else "?"
per = {m: [r for r in rows if r[1] == m] for m in modes}
med = lambda m, k: statistics.median(float(r[k]) for r in per[m])
ms = {m: med(m, 2) for m in modes}
val = {m: med(m, 3) for m in modes}
ran = {m: len(per[m]) for m in modes}
L = []
w = L.append
w("# SkipPipe against the full pipeline, real runs")
w("")
w("\`deploy/bench/bench_skippipe.sh\` (#14, #24): \`examples/skippipe-run.yaml\`, 6 stage positions x 2 replicas of a 12-layer,")
w("d_model-64 model, one stage actor per region of the geo12 preset (emulated links), gpipe, 3 microbatches per replica,")
w("$steps steps per run. Every configuration ran in each of $rounds rounds (order rotated each round); ms/step and")
w("validation loss (full model, equal tokens) are medians over the rounds run. A real run does not bound what a node")
w("holds: a node past stage 0 holds every microbatch its plan gives it, so each pair compares plans under the same")
w("node memory bound: held (memory $memory, the example's) or not held (memory $agents, every microbatch of the step).")
w("")
w("- machine: ${cpu:-unknown CPU}, $(nproc) cores; kernel target " + kernel)
w("- load (1, 5, 15 min): $load_before before, $load_after after")
w("- commit $commit, $(date -u '+%F %H:%M UTC')")
w("- rounds run: " + ", ".join(f"{m} {ran[m]}" for m in modes))
w("")
w("| memory bound | paths | settings | most microbatches on one node | cost model s/iteration | measured ms/step (median) | each round | SkipPipe vs this | val loss (median) | SkipPipe's val loss vs this |")
w("|---|---|---|---|---|---|---|---|---|---|")
for m in modes:
    held = not m.endswith("_all")
    sp = "skippipe" if held else "skippipe_all"
    label = f"held ({$memory})" if held else "not held"
    w(f"| {label} | {m} | \`{sets[m]}\` | {most[m]} | {float(plan[m]):.3f} | {ms[m]:.1f} | "
      + " ".join(f"{float(r[2]):.1f}" for r in per[m])
      + f" | {100 * (ms[sp] / ms[m] - 1):+.1f}% | {val[m]:.4f} | {100 * (val[sp] / val[m] - 1):+.1f}% |")
short = [float(r[4]) for r in per["skippipe"] if r[4] != "nan"]
if short:
    w("")
    w(f"SkipPipe's model (memory held) on a path of its L stages: val loss {statistics.median(short):.4f} (median).")
text = "\n".join(L) + "\n"
open(results, "w").write(text)
print(text)
PY
