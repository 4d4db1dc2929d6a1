#!/usr/bin/env bash
# Two troupe builds side by side on the main example: runs them alternately
# (so drift in machine load hits both alike) and prints the median wall ms/step
# and CPU seconds per step of each, and their ratio. For "is this change slower?":
#   deploy/bench/bench_compare.sh OLD_TROUPE NEW_TROUPE [--rounds N] [--steps N] [--graph FILE]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
(($# >= 2)) || { echo "usage: $0 OLD_TROUPE NEW_TROUPE [--rounds N] [--steps N] [--graph FILE]" >&2; exit 2; }
old=$1 new=$2
shift 2
rounds=3 steps=300 graph=examples/tiny-gpt.yaml
while (($#)); do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --graph) graph=$2; shift 2 ;;
    *) echo "usage: $0 OLD_TROUPE NEW_TROUPE [--rounds N] [--steps N] [--graph FILE]" >&2; exit 2 ;;
  esac
done
for t in "$old" "$new"; do [[ -x $t ]] || { echo "bench: $t is not an executable" >&2; exit 1; }; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ms_per_step() { sed -n 's/.*"ms_per_step": *\([0-9.eE+-]*\).*/\1/p' "$1"; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
declare -A wall cpu
TIMEFORMAT='%U %S'
for ((r = 1; r <= rounds; r++)); do
  order=(old new)
  ((r % 2 == 0)) && order=(new old)
  for which in "${order[@]}"; do
    exe=$old
    [[ $which == new ]] && exe=$new
    { time "$exe" run "$graph" --steps "$steps" --no-trace --summary-json "$tmp/$which.json" > /dev/null; } 2> "$tmp/time"
    ms=$(ms_per_step "$tmp/$which.json")
    c=$(awk -v s="$steps" '{printf "%.4f", ($1 + $2) / s}' "$tmp/time")
    wall[$which]+="$ms "
    cpu[$which]+="$c "
    printf 'round %d %-3s %8.1f ms/step  %.4f cpu s/step\n' "$r" "$which" "$ms" "$c" >&2
  done
done
mo=$(tr ' ' '\n' <<<"${wall[old]}" | grep . | median)
mn=$(tr ' ' '\n' <<<"${wall[new]}" | grep . | median)
co=$(tr ' ' '\n' <<<"${cpu[old]}" | grep . | median)
cn=$(tr ' ' '\n' <<<"${cpu[new]}" | grep . | median)
printf '\n%s, %d steps, %d rounds alternating (medians)\n' "$graph" "$steps" "$rounds"
printf '| build | ms/step | cpu s/step |\n|---|---|---|\n'
printf '| old | %.1f | %.4f |\n| new | %.1f | %.4f |\n' "$mo" "$co" "$mn" "$cn"
awk -v a="$mo" -v b="$mn" -v c="$co" -v d="$cn" 'BEGIN {printf "| new/old | %.3f | %.3f |\n", b / a, d / c}'
