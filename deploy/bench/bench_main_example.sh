#!/usr/bin/env bash
# The README's main example in full (examples/tiny-gpt.yaml, 2,000 steps), as a
# benchmark rather than a test (tests/integration/tiny_example runs 200 steps):
# prints one table row per run with ms/step, tokens/s, the final train and
# validation loss and the wall time, plus the machine it ran on.
#   deploy/bench/bench_main_example.sh [TROUPE] [--runs N] [--steps N] [--threads N]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
troupe=build/deploy/troupe runs=1 steps=2000 extra=()
usage="usage: $0 [TROUPE] [--runs N] [--steps N] [--threads N]"
while (($#)); do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --threads) extra+=(--threads "$2"); shift 2 ;;
    -h|--help) echo "$usage"; exit 0 ;;
    -*) echo "$usage" >&2; exit 2 ;;
    *) troupe=$1; shift ;;
  esac
done
[[ -x $troupe ]] || { echo "bench: $troupe is not an executable (build it: cmake --build build --target troupe)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores available; examples/tiny-gpt.yaml, $steps steps, no trace"
printf '%-4s %10s %10s %11s %9s %10s\n' run ms/step tokens/s train_loss val_loss wall
for ((r = 1; r <= runs; r++)); do
  start=$(date +%s.%N)
  "$troupe" run examples/tiny-gpt.yaml --steps "$steps" --no-trace "${extra[@]}" \
    --summary-json "$tmp/summary.json" > "$tmp/out.txt"
  end=$(date +%s.%N)
  python3 - "$tmp/summary.json" "$r" "$start" "$end" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
wall = float(sys.argv[4]) - float(sys.argv[3])
num = lambda v, f: format(v, f) if v is not None else "-"
print(f"{sys.argv[2]:<4} {num(s['ms_per_step'], '10.1f')} {num(s['tokens_per_s'], '10.0f')} "
      f"{num(s['train_loss'], '11.4f')} {num(s['val_loss'], '9.4f')} {int(wall) // 60:>6d}m{int(wall) % 60:02d}s")
PY
done
