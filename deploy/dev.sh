#!/usr/bin/env bash
# One entry point for a new user: set up, build, then run the main example or the tests.
#   deploy/dev.sh example   trains examples/tiny-gpt.yaml
#   deploy/dev.sh test      runs the whole test suite (quick and slow), then the
#                           quick suite again under address and undefined-behaviour sanitizers
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
what=${1:-}
case "$what" in
  example | test) ;;
  *) echo "usage: deploy/dev.sh example|test" >&2; exit 2 ;;
esac

deploy/setup.sh $([[ $what == test ]] && echo --test)   # the test path adds SLURM, munge and sshd
export OPENBLAS_CORETYPE=SkylakeX   # OpenBLAS picks a 2x slower sgemm on this CPU otherwise
jobs=$(nproc)

build() { # build DIR TARGET [cmake options...]
  local dir=$1 target=$2; shift 2
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" --target "$target"
}

if [[ $what == example ]]; then
  # Only the program and what it loads (about a third of the targets: no tests, no benchmarks).
  build build troupe -DCMAKE_BUILD_TYPE=Release
  exec build/deploy/troupe run examples/tiny-gpt.yaml
fi

build build all -DCMAKE_BUILD_TYPE=Release
(cd build && ctest --output-on-failure -j "$jobs" --label-exclude gpu)
build build-asan all -DCMAKE_BUILD_TYPE=Debug -DTROUPE_SANITIZE=ON -DTROUPE_CUDA=OFF
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$here/tests/ubsan.supp" \
  ctest --output-on-failure -j "$jobs" -L quick)
