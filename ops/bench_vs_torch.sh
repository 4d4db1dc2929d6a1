#!/usr/bin/env bash
# Builds bench_gpt and prints troupe vs PyTorch training speed side by side
# (configs A and B of issue 3). Installs Debian's python3-torch when missing.
# Usage: ops/bench_vs_torch.sh [BUILD_DIR] [bench_gpt args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "bench_vs_torch: installing PyTorch (deploy/setup.sh --bench)" >&2
  "$root/deploy/setup.sh" --bench
fi
[[ -f $build/build.ninja || -f $build/Makefile ]] ||
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" --target bench_gpt
export TROUPE_SOURCE_DIR=$root
exec "$build/ops/bench_gpt" "$@"
