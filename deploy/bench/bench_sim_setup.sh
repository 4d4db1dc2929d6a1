#!/usr/bin/env bash
# `troupe sim` set-up against the graph's size: examples/sim/10k_devices.yaml
# (16 stages) at 1k to 40k devices, 1 step. Prints the whole command's wall
# time, the simulation's own (wall_s), and the rest (loading, expanding and
# checking the graph, building the cluster) per device, which stays flat when
# set-up is linear in the actors (it grew with N before the graph's name index).
#   deploy/bench/bench_sim_setup.sh [--build DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
build=build
case ${1:-} in
  "") ;;
  --build) [[ $# -eq 2 ]] || { echo "usage: $0 [--build DIR]" >&2; exit 2; }; build=$2 ;;
  -h | --help) echo "usage: $0 [--build DIR]"; exit 0 ;;
  *) echo "bench_sim_setup: unknown argument '$1'" >&2; echo "usage: $0 [--build DIR]" >&2; exit 2 ;;
esac
troupe="$build/deploy/troupe"
[[ -x $troupe ]] || { echo "bench_sim_setup: build first ($troupe)" >&2; exit 2; }
printf '%8s %8s %10s %10s %10s %16s %10s\n' devices actors "total s" "sim s" "set-up s" "set-up us/device" "peak MB"
for replicas in 62 156 625 2500; do
  out=$( { /usr/bin/time -f '%e %M' "$troupe" sim examples/sim/10k_devices.yaml --set data_parallel.replicas=$replicas \
    --steps 1 --json 2>&1 >/tmp/bench_sim_setup.$$.json; } 2>&1 | tail -1)
  read -r total kb <<<"$out"
  sim=$(sed -n 's/.*"wall_s": *\([0-9.eE+-]*\).*/\1/p' /tmp/bench_sim_setup.$$.json)
  devices=$(sed -n 's/.*"devices": *\([0-9]*\).*/\1/p' /tmp/bench_sim_setup.$$.json)
  awk -v d="$devices" -v t="$total" -v s="$sim" -v kb="$kb" 'BEGIN {
    printf "%8d %8d %10.2f %10.2f %10.2f %16.1f %10.0f\n", d, 2 * d + 1, t, s, t - s, 1e6 * (t - s) / d, kb / 1024 }'
done
rm -f /tmp/bench_sim_setup.$$.json
