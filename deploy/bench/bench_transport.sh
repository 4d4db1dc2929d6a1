#!/usr/bin/env bash
# TCP and UCX side by side between two processes on this machine, the UCX
# progress thread's idle spin off (TROUPE_UCX_SPIN_US=0: sleep at once, the old
# behaviour) and at its default, run alternately round by round so drift in load
# hits all alike; prints the medians of bench_transport's rows and the load (#12).
#   deploy/bench/bench_transport.sh [BUILD_DIR] [--rounds N]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=$here/build rounds=5
while (($#)); do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    -h | --help) echo "usage: $0 [BUILD_DIR] [--rounds N]"; exit 0 ;;
    -*) echo "usage: $0 [BUILD_DIR] [--rounds N]" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
bench=$build/runtime/bench_transport
[[ -x $bench ]] || { echo "bench: $bench missing (cmake --build $build --target bench_transport)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "load before: $(uptime)"
for ((r = 1; r <= rounds; r++)); do
  modes=(0 default)
  ((r % 2)) || modes=(default 0)
  for m in "${modes[@]}"; do
    if [[ $m == 0 ]]; then TROUPE_UCX_SPIN_US=0 "$bench" 5; else env -u TROUPE_UCX_SPIN_US "$bench" 5; fi |
      awk -v m="$m" '$2 == "none" {print $1, m, $5, $6, $7, $8}' >>"$tmp/rows"
  done
done
echo "load after:  $(uptime)"
echo "medians of $rounds alternating rounds (each row itself a median of bench_transport's runs)"
printf '%-9s %-8s %8s %12s %12s %14s\n' transport ucx-spin GB/s "rtt 64B us" "rtt 4KiB us" "rtt 4KiB-blob"
for t in tcp ucx; do
  for m in 0 default; do
    grep -q "^$t $m " "$tmp/rows" || continue
    col() { awk -v t="$t" -v m="$m" -v c="$1" '$1 == t && $2 == m {print $c}' "$tmp/rows" | median; }
    printf '%-9s %-8s %8.2f %12.1f %12.1f %14.1f\n' "$t" "$m" "$(col 3)" "$(col 4)" "$(col 5)" "$(col 6)"
  done
done
