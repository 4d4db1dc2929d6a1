#!/usr/bin/env bash
# Tracing overhead of the default: the main example (examples/tiny-gpt.yaml)
# with its whole-run trace written as it goes (default ring, default flushes;
# only the file's place differs from trace.file) against --no-trace, side by
# side in one benchmark run, alternating which goes first so drift in machine
# load hits both alike. Prints each run, then the medians of wall ms/step and of
# CPU time (user + system) per step, which a busy shared machine disturbs less,
# and checks that every traced run kept every span. On a loaded machine both
# medians move by more than tracing costs, so it also gives tracing's own
# cost, which load does not change: the writer thread's CPU time (troupe
# prints it) and the actors' recording (build/runtime/bench_trace_record's
# ns per span times the spans), against the untraced run's CPU per step.
#   deploy/bench/bench_trace_overhead.sh [--build DIR] [--rounds N] [--steps N] [--dashboard]
# --dashboard also serves the live dashboard in the traced runs (no viewer attached).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
build=build rounds=5 steps=200 dashboard=0
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --dashboard) dashboard=1; shift ;;
    -h | --help) echo "usage: $0 [--build DIR] [--rounds N] [--steps N] [--dashboard]"; exit 0 ;;
    *) echo "usage: $0 [--build DIR] [--rounds N] [--steps N] [--dashboard]" >&2; exit 2 ;;
  esac
done
troupe="$build/deploy/troupe"
[[ -x $troupe ]] || { echo "bench: $troupe not built (cmake --build $build --target troupe)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ms_per_step() { # JSON summary file -> ms/step
  sed -n 's/.*"ms_per_step": *\([0-9.eE+-]*\).*/\1/p' "$1"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

off=() on=() cpu_off=() cpu_on=() writer=()
TIMEFORMAT='%U %S'
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores; examples/tiny-gpt.yaml, $steps steps, $rounds rounds"
printf '%-5s %-4s %10s %14s %9s %8s\n' round mode ms/step "CPU ms/step" spans dropped

for ((r = 1; r <= rounds; r++)); do
  # Alternate which goes first, so neither always runs on a warmer machine.
  order=(off on)
  ((r % 2 == 0)) && order=(on off)
  for mode in "${order[@]}"; do
    args=(run examples/tiny-gpt.yaml --steps "$steps" --summary-json "$tmp/$mode.json")
    if [[ $mode == off ]]; then
      args+=(--no-trace)
    else
      rm -f "$tmp/trace.json"
      args+=(--trace "$tmp/trace.json")
      ((dashboard)) && args+=(--dashboard 127.0.0.1:0)
    fi
    { time "$troupe" "${args[@]}" >"$tmp/$mode.log" 2>&1; } 2>"$tmp/time" || { cat "$tmp/$mode.log" >&2; exit 1; }
    v=$(ms_per_step "$tmp/$mode.json")
    [[ -n $v ]] || { echo "bench: no ms_per_step in $(cat "$tmp/$mode.json")" >&2; exit 1; }
    c=$(awk -v s="$steps" '{printf "%.3f", 1000 * ($1 + $2) / s}' "$tmp/time")
    spans=- dropped=-
    if [[ $mode == off ]]; then
      off+=("$v") cpu_off+=("$c")
    else
      on+=("$v") cpu_on+=("$c")
      spans=$(grep -c '"ph":"X"' "$tmp/trace.json")
      dropped=$(sed -n 's/.*"dropped_spans":\([0-9]*\).*/\1/p' "$tmp/trace.json")
      mb=$(du -m "$tmp/trace.json" | cut -f1)
      [[ $dropped == 0 ]] || echo "bench: round $r's trace dropped $dropped spans" >&2
      w=$(sed -n 's/.*(\([0-9.]*\) s of CPU to write).*/\1/p' "$tmp/on.log")
      writer+=("$(awk -v w="${w:-0}" -v s="$steps" 'BEGIN {printf "%.4f", 1000 * w / s}')")
    fi
    printf '%-5d %-4s %10.2f %14.2f %9s %8s\n' "$r" "$mode" "$v" "$c" "$spans" "$dropped"
  done
done
m_off=$(printf '%s\n' "${off[@]}" | median)
m_on=$(printf '%s\n' "${on[@]}" | median)
c_off=$(printf '%s\n' "${cpu_off[@]}" | median)
c_on=$(printf '%s\n' "${cpu_on[@]}" | median)
w_on=$(printf '%s\n' "${writer[@]}" | median)
record_ns=0
if [[ -x $build/runtime/bench_trace_record ]]; then
  # The recorder's cost per span (on minus off; the clock reads are paid either way), at least 0.
  record_ns=$("$build/runtime/bench_trace_record" | sed -n 's/.*(\(-\{0,1\}[0-9.]*\) ns to record).*/\1/p')
  record_ns=$(awk -v r="${record_ns:-0}" 'BEGIN {print (r > 0) ? r : 0}')
fi
awk -v off="$m_off" -v on="$m_on" -v coff="$c_off" -v con="$c_on" -v n="$spans" -v mb="$mb" -v d="$dropped" \
    -v w="$w_on" -v rec="${record_ns:-0}" -v s="$steps" 'BEGIN {
  printf "\n| median of the rounds | tracing off | whole-run trace | overhead |\n|---|---|---|---|\n"
  printf "| wall ms/step | %.2f | %.2f | %+.2f%% |\n", off, on, 100 * (on - off) / off
  printf "| CPU ms/step (user + system) | %.2f | %.2f | %+.2f%% |\n", coff, con, 100 * (con - coff) / coff
  r = n / s * rec / 1e6
  printf "| writer thread, CPU ms/step | - | %.3f | %.3f%% of an untraced step |\n", w, 100 * w / coff
  printf "| recording in the actors, ms/step (%.0f spans x %.0f ns) | - | %.4f | %.4f%% |\n", n / s, rec, r, 100 * r / coff
  printf "\nper traced run: %d spans in a %d MB file, %d dropped\n", n, mb, d
}'
