#!/usr/bin/env bash
# `deploy/dev.sh example` builds the program and what it loads, not every test
# and benchmark (#17 item 15: it once built all 283 targets before training).
# Usage: dev_example_targets.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
fail() { echo "FAIL: $*" >&2; exit 1; }

[[ -f $build/build.ninja ]] || { echo "skipped: $build is not a Ninja build"; exit 77; }

plan=$("$src/deploy/dev.sh" example --dry-run)
echo "$plan"
target=$(sed -n 's/^cmake --build build .*--target \([^ ]*\).*/\1/p' <<<"$plan")
[[ -n $target ]] || fail "no 'cmake --build build … --target T' in the plan"
[[ $target != all ]] || fail "the example builds every target"

# What that target pulls in, transitively: the program and its libraries only.
inputs=$(ninja -C "$build" -t inputs "$target")
(($(wc -l <<<"$inputs") > 0)) || fail "ninja lists no inputs for $target"
if grep -E '(^|/)(test|bench)_[^/]*$|\.(test|bench)\.cpp' <<<"$inputs"; then
  fail "$target depends on the tests or benchmarks above"
fi
grep -q 'deploy/cli/main.cpp' <<<"$inputs" || fail "$target does not build deploy/cli/main.cpp"
echo "$target pulls in $(wc -l <<<"$inputs") inputs, no test and no benchmark"
