#!/usr/bin/env bash
# Tracing overhead: the tiny example with tracing off and on, side by side in one
# benchmark run (alternating, so drift in machine load hits both alike): the
# median wall ms/step of each, and the median CPU time (user + system) per step,
# which a busy shared machine disturbs less than wall time.
#   deploy/bench_trace_overhead.sh [--build DIR] [--rounds N] [--steps N] [--dashboard]
# --dashboard also serves the live dashboard in the traced runs (no viewer attached).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
build=build rounds=7 steps=40 dashboard=0
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --dashboard) dashboard=1; shift ;;
    *) echo "usage: $0 [--build DIR] [--rounds N] [--steps N] [--dashboard]" >&2; exit 2 ;;
  esac
done
export OPENBLAS_CORETYPE=SkylakeX
troupe="$build/deploy/troupe"
[[ -x $troupe ]] || { echo "bench: $troupe not built (cmake --build $build --target troupe)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ms_per_step() { # JSON summary file -> ms/step
  sed -n 's/.*"ms_per_step": *\([0-9.eE+-]*\).*/\1/p' "$1"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

off=() on=() cpu_off=() cpu_on=()
TIMEFORMAT='%U %S'

for ((r = 1; r <= rounds; r++)); do
  # Alternate which goes first, so neither always runs on a warmer machine.
  order=(off on)
  ((r % 2 == 0)) && order=(on off)
  for mode in "${order[@]}"; do
    args=(run examples/tiny-gpt.yaml --steps "$steps" --summary-json "$tmp/$mode.json")
    if [[ $mode == off ]]; then
      args+=(--no-trace)
    else
      args+=(--trace "$tmp/trace.json")
      ((dashboard)) && args+=(--dashboard 127.0.0.1:0)
    fi
    { time "$troupe" "${args[@]}" >"$tmp/$mode.log" 2>&1; } 2>"$tmp/time" || { cat "$tmp/$mode.log" >&2; exit 1; }
    v=$(ms_per_step "$tmp/$mode.json")
    [[ -n $v ]] || { echo "bench: no ms_per_step in $(cat "$tmp/$mode.json")" >&2; exit 1; }
    c=$(awk -v s="$steps" '{printf "%.3f", 1000 * ($1 + $2) / s}' "$tmp/time")
    if [[ $mode == off ]]; then off+=("$v") cpu_off+=("$c"); else on+=("$v") cpu_on+=("$c"); fi
    printf 'round %d  %-3s  %8.2f ms/step  %8.2f CPU ms/step\n' "$r" "$mode" "$v" "$c"
  done
done
m_off=$(printf '%s\n' "${off[@]}" | median)
m_on=$(printf '%s\n' "${on[@]}" | median)
c_off=$(printf '%s\n' "${cpu_off[@]}" | median)
c_on=$(printf '%s\n' "${cpu_on[@]}" | median)
spans=$(grep -o '"ph":"X"' "$tmp/trace.json" | wc -l)
awk -v off="$m_off" -v on="$m_on" -v coff="$c_off" -v con="$c_on" -v r="$rounds" -v s="$steps" -v n="$spans" 'BEGIN {
  printf "\ntiny-gpt, %d steps, %d rounds (alternating); %d spans per traced run\n", s, r, n
  printf "median ms/step: tracing off %.2f, tracing on %.2f\n", off, on
  printf "median CPU ms/step: tracing off %.2f, tracing on %.2f\n", coff, con
  printf "tracing overhead: %+.2f%% wall, %+.2f%% CPU\n", 100 * (on - off) / off, 100 * (con - coff) / coff
}'
