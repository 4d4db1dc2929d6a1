#!/usr/bin/env bash
# SkipPipe against the full pipeline in real runs (#14): examples/skippipe-run.yaml,
# 6 stage positions x 2 data-parallel replicas of a 12-layer, d_model-64 model,
# one stage actor per region of the geo12 preset, every channel between two
# stages (and between their all-reduce peers) emulating the link between their
# regions. Same placement, same tokens, same validation batches; only the paths
# differ:
#   skippipe  each microbatch visits 4 of the 6 positions (a third skipped)
#   full      every position in order, on chains the planner picks (no memory bound)
#   chains    every position in order, each replica on its own chain (DT-FM's fixed
#             chains: what a plain pipeline with data parallelism routes)
# Reports the measured iteration time (ms/step over the run) and the validation
# loss of the full model after the last step (SkipPipe also on a path of 4 stages),
# medians over rounds, alternating the order each round; and the cost model's
# iteration time of each plan (`troupe plan paths`). Run timing under the lock the
# other benchmarks take: flock /work/bench.lock deploy/bench/bench_skippipe.sh
#   deploy/bench/bench_skippipe.sh [--rounds N] [--steps N] [--max-per-stage K] [--build DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
rounds=1 steps=60 per_stage=4 build=build
while (($#)); do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --max-per-stage) per_stage=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--steps N] [--max-per-stage K] [--build DIR]" >&2; exit 2 ;;
  esac
done
troupe="$here/$build/deploy/troupe"
[[ -x $troupe ]] || { echo "bench_skippipe: build first ($troupe)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
graph=examples/skippipe-run.yaml
# max_per_stage 4 spreads the 18 visits of a step over all 5 positions past stage
# 0 (with 6, the plan leaves a position untrained and its full model is worse).
sets=(--set "train.steps=$steps" --set "skip.max_per_stage=$per_stage")

field() { python3 -c "import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2]); print('nan' if v is None else v)" "$1" "$2"; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

modes=(skippipe full chains)
declare -A ms val short plan
for m in "${modes[@]}"; do
  plan[$m]=$("$troupe" plan paths "$graph" "${sets[@]}" --set "skip.planner=$m" --json |
    python3 -c "import json,sys; print(json.load(sys.stdin)['time']['planned'])")
done
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $graph, $steps steps, max_per_stage $per_stage, $rounds round(s)"
printf '%-6s %-9s %10s %10s %12s\n' round mode ms/step val_loss val_L_stages
for ((r = 1; r <= rounds; r++)); do
  order=("${modes[@]}")
  ((r % 2 == 0)) && order=(chains full skippipe)
  for m in "${order[@]}"; do
    "$troupe" run "$graph" "${sets[@]}" --set "skip.planner=$m" --no-trace --summary-json "$tmp/$m.json" \
      >"$tmp/$m.log" 2>&1 || { cat "$tmp/$m.log" >&2; exit 1; }
    ms[$m]+="$(field "$tmp/$m.json" ms_per_step) "
    val[$m]+="$(field "$tmp/$m.json" val_loss) "
    short[$m]+="$(field "$tmp/$m.json" val_loss_short) "
    printf '%-6d %-9s %10.1f %10.4f %12s\n' "$r" "$m" "$(field "$tmp/$m.json" ms_per_step)" \
      "$(field "$tmp/$m.json" val_loss)" "$(field "$tmp/$m.json" val_loss_short)"
  done
done
declare -A mms mval
for m in "${modes[@]}"; do
  mms[$m]=$(printf '%s\n' ${ms[$m]} | median)
  mval[$m]=$(printf '%s\n' ${val[$m]} | median)
done
echo
echo "| paths | planned s/iteration (cost model) | measured ms/step | SkipPipe's time vs this | val loss (full model) | SkipPipe's val loss vs this |"
echo "|---|---|---|---|---|---|"
for m in "${modes[@]}"; do
  awk -v m="$m" -v p="${plan[$m]}" -v t="${mms[$m]}" -v v="${mval[$m]}" -v st="${mms[skippipe]}" -v sv="${mval[skippipe]}" 'BEGIN {
    printf "| %s | %.3f | %.1f | %+.1f%% | %.4f | %+.1f%% |\n", m, p, t, 100 * (st / t - 1), v, 100 * (sv / v - 1) }'
done
echo "(SkipPipe's model on a path of 4 of 6 stages: val loss $(printf '%s\n' ${short[skippipe]} | median))"
