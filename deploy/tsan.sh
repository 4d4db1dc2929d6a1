#!/usr/bin/env bash
# The quick suite under ThreadSanitizer: builds CAF 0.17.6 from Debian's source with
# -fsanitize=thread (once, into a prefix), then troupe against it in build-tsan, and
# runs `ctest -L quick` there. Idempotent; run as root (or with sudo available).
#   deploy/tsan.sh [CTEST_ARGS...]   e.g. deploy/tsan.sh -R runtime   (one part only)
# Environment: TSAN_CAF_PREFIX (default build-tsan-caf/prefix), JOBS (default nproc),
# NICE (default 19: the builds and tests take the machine's idle time only; 0 to skip),
# TARGETS (default all: e.g. "troupe test_integration_stragglers" builds only what a
# -R selection runs; the tests that start troupe need the troupe target).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
caf_version=0.17.6
caf_dir=$here/build-tsan-caf # ignored by git (/build*/)
prefix=${TSAN_CAF_PREFIX:-$caf_dir/prefix}
jobs=${JOBS:-$(nproc)}
nice_level=${NICE:-19}
((nice_level > 0)) && renice -n "$nice_level" -p $$ >/dev/null # children inherit it
step() { echo "tsan: $(date +%H:%M:%S) $*"; }

sudo_cmd=()
[[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)

# 0. The packages, the dashboard and the corpus (data/kjv.txt) the tests read.
step "setup: deploy/setup.sh"
deploy/setup.sh

# 1. CAF with -fsanitize=thread. Debian's libcaf is uninstrumented: TSan cannot see the
#    synchronisation inside it and reports races in CAF's own reference counts.
if [[ -f $prefix/lib/libcaf_core.so && -f $prefix/include/caf/all.hpp ]]; then
  step "CAF: $prefix is there, skipping its build"
else
  mkdir -p "$caf_dir/src"
  cd "$caf_dir/src"
  tarball=actor-framework_$caf_version.orig.tar.gz
  if [[ ! -f $tarball ]]; then
    if ! apt-cache showsrc libcaf-dev 2>/dev/null | grep -q "^Version: $caf_version"; then
      step "CAF: adding Debian's source packages (deb-src) to apt"
      sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources |
        "${sudo_cmd[@]}" tee /etc/apt/sources.list.d/troupe-deb-src.sources >/dev/null
      "${sudo_cmd[@]}" apt-get update -q >/dev/null
    fi
    step "CAF: apt-get source libcaf-dev (actor-framework $caf_version)"
    # Only the upstream tarball is used; the Debian part may be gone from the mirror
    # (a 404 for its .debian.tar.xz here), so a failed fetch is judged by the tarball.
    apt-get source -q --download-only libcaf-dev || true
    [[ -f $tarball ]] || { echo "tsan: $tarball was not fetched" >&2; exit 1; }
  fi
  rm -rf "actor-framework-$caf_version"
  tar xzf "$tarball"
  # GCC 12's libstdc++ no longer includes <limits> through <memory>.
  sed -i 's|#include <cstddef>|#include <cstddef>\n#include <limits>|' \
    "actor-framework-$caf_version/libcaf_io/caf/io/network/receive_buffer.hpp"
  step "CAF: building with -fsanitize=thread into $prefix (8 minutes on 2 cores)"
  # -O1 -g as troupe's own TSan build: line numbers in reports, half the -O3 compile time.
  cmake -S "actor-framework-$caf_version" -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g -fsanitize=thread -fno-omit-frame-pointer" \
    -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib -DCAF_NO_EXAMPLES=yes -DCAF_NO_UNIT_TESTS=yes \
    -DCAF_NO_TOOLS=yes -DCAF_NO_PYTHON=yes -DCAF_NO_OPENCL=yes -DCAF_NO_OPENSSL=yes \
    -DCAF_NO_SUMMARY=yes >/dev/null
  cmake --build build -j "$jobs"
  cmake --install build >/dev/null
  cd "$here"
  step "CAF: installed in $prefix"
fi

# 2. troupe in build-tsan against that CAF (CMAKE_PREFIX_PATH is searched before /usr).
step "troupe: configuring build-tsan"
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTROUPE_TSAN=ON -DTROUPE_CUDA=OFF \
  -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
grep -q "^CAF_CORE_LIBRARY:FILEPATH=$prefix/" build-tsan/CMakeCache.txt || {
  echo "tsan: build-tsan found another CAF: $(grep ^CAF_CORE_LIBRARY build-tsan/CMakeCache.txt)" >&2
  echo "tsan: remove build-tsan/CMakeCache.txt and run again" >&2
  exit 1
}
targets=${TARGETS:-all}
step "troupe: building $targets (45 minutes or more on 2 cores for all)"
# shellcheck disable=SC2086 # TARGETS is a list of target names
cmake --build build-tsan -j "$jobs" --target $targets

# 3. The quick suite. A race fails its test (halt_on_error=1 in TSAN_OPTIONS).
# Tests that start the troupe program (bad_input, examples.check) get no
# environment from troupe_add_module: without UCX_MEM_EVENTS=no UCX's memory
# hooks segfault every TSan process at exit (`troupe check` exited 139 after
# printing the right error), so both are set for every test here.
export UCX_MEM_EVENTS=no
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$here/tests/tsan.supp}
step "troupe: ctest -L quick $*"
start=$(date +%s)
status=0
(cd build-tsan && ctest -L quick -j "$jobs" --output-on-failure "$@") || status=$?
races=$(grep -c "WARNING: ThreadSanitizer" build-tsan/Testing/Temporary/LastTest.log || true)
step "quick suite: $(($(date +%s) - start)) s, ctest exit $status, TSan reports: $races"
exit "$status"
