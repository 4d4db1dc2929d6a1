#!/usr/bin/env bash
# One entry point for a new user: set up, build, then run the main example or the tests.
#   deploy/dev.sh example   trains examples/tiny-gpt.yaml
#   deploy/dev.sh test      runs the whole test suite (quick and slow), then the
#                           quick suite again under address and undefined-behaviour sanitizers
#   add --dry-run to print the commands instead of running them
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
what=${1:-} dry=0
case "${2:-}" in
  "") ;;
  --dry-run) dry=1 ;;
  *) what= ;;
esac
case "$what" in
  example | test) ;;
  *) echo "usage: deploy/dev.sh example|test [--dry-run]" >&2; exit 2 ;;
esac
run() { # the command, or with --dry-run its words
  if ((dry)); then echo "$*"; else "$@"; fi
}

run deploy/setup.sh $([[ $what == test ]] && echo --test)   # the test path adds SLURM, munge and sshd
jobs=$(nproc)

build() { # build DIR TARGET [cmake options...]
  local dir=$1 target=$2; shift 2
  if ((dry)); then
    run cmake -S . -B "$dir" -G Ninja "$@"
  else
    cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  fi
  run cmake --build "$dir" -j "$jobs" --target "$target"
}

if [[ $what == example ]]; then
  # Only the program and what it loads (about a third of the targets: no tests, no benchmarks).
  build build troupe -DCMAKE_BUILD_TYPE=Release
  ((dry)) && exec echo build/deploy/troupe run examples/tiny-gpt.yaml
  exec build/deploy/troupe run examples/tiny-gpt.yaml
fi

build build all -DCMAKE_BUILD_TYPE=Release
run ctest --test-dir build --output-on-failure -j "$jobs" --label-exclude gpu
build build-asan all -DCMAKE_BUILD_TYPE=Debug -DTROUPE_SANITIZE=ON -DTROUPE_CUDA=OFF
export ASAN_OPTIONS=detect_leaks=1
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$here/tests/ubsan.supp"
run ctest --test-dir build-asan --output-on-failure -j "$jobs" -L quick
