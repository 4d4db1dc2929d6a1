#!/bin/sh
# SkipPipe's plan on examples/skippipe-geo20.yaml over several seeds (placement
# search and random draws) and memories: the iteration time under the cost model
# of the plan, the full pipeline (planned chains and DT-FM's fixed chains), random
# skipping and the plan without collision awareness, and the planner's wall time.
#   B=build deploy/bench/bench_skippipe_plan.sh
set -eu
if [ $# -gt 0 ]; then
  echo "usage: [B=build] $0   (no arguments)"
  case $1 in -h | --help) exit 0 ;; *) exit 2 ;; esac
fi
B=${B:-build}
cd "$(dirname "$0")/../.."
printf '%-6s %-4s %9s %9s %9s %9s %9s %8s %7s\n' memory seed planned full fixed random blind "vs full" wall_s
for memory in 3 4; do
  for seed in 1 2 3 5 7; do
    start=$(date +%s.%N)
    out=$("$B/deploy/troupe" plan paths examples/skippipe-geo20.yaml --json --set skip.memory=$memory \
          --set skip.seed=$seed 2>"$B/plan_err.txt") ||  # stderr: progress lines past 2 s, or why no plan
      { printf '%-6s %-4s %s\n' $memory $seed "no plan: $(cat "$B/plan_err.txt")"; continue; }
    end=$(date +%s.%N)
    echo "$out" | python3 -c "
import json, sys
t = json.load(sys.stdin)['time']
print('%-6s %-4s %9.2f %9.2f %9.2f %9.2f %9.2f %7.1f%% %7.2f' % ($memory, $seed, t['planned'], t['full'],
      t['full_fixed_chains'], t['random'], t['no_collision_awareness'], 100 * (t['planned'] / t['full'] - 1),
      $end - $start))"
  done
done
