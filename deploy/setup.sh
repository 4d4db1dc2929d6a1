#!/usr/bin/env bash
# Installs every Debian package troupe's build, tests and examples need, and
# prepares the default corpus. Idempotent; run as root (or with sudo available).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

packages=(
  build-essential cmake ninja-build pkg-config git
  libcaf-dev libyaml-cpp-dev libfmt-dev doctest-dev nlohmann-json3-dev libcli11-dev
  libopenblas-dev libhwy-dev libboost-dev libboost-system-dev libucx-dev libsentencepiece-dev
  bible-kjv
  chromium
)
# Extra packages for benchmarks only (large): `deploy/setup.sh --bench`.
bench_packages=(python3-torch python3-numpy hyperfine)
# Extra packages for the test suite only: `deploy/setup.sh --test`. The launcher
# tests start a two-node SLURM cluster and an sshd on this machine (tests/cluster/);
# qemu-user runs troupe on an emulated CPU without AVX-512 (kernel_targets_qemu);
# clang-format checks the tree's layout (setup.clang_format); python3-numpy runs the
# independent GPT-2 that reads `troupe export`'s file (tests/hf/gpt2_numpy.py).
test_packages=(slurm-wlm munge openssh-server openssh-client qemu-user clang-format python3-numpy)

want=("${packages[@]}")
[[ " $* " == *" --bench "* ]] && want+=("${bench_packages[@]}")
[[ " $* " == *" --test "* ]] && want+=("${test_packages[@]}")

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: run as root or install sudo" >&2; exit 1; }
  sudo_cmd=(sudo)
fi

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js may come from another packager (nodesource bundles npm and conflicts
# with Debian's npm): install Debian's only when the commands are missing.
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all Debian packages present"
fi

# --- dashboard front end (npm) -------------------------------------------
# Builds runtime/trace/dashboard into runtime/trace/dashboard/dist, which `troupe run
# --dashboard` and `troupe dash` serve; also installs the browser and trace
# engine test tools (playwright-core, @paulirish/trace_engine). Needs the npm
# registry only here: the page itself loads nothing from the network.
dash="$here/runtime/trace/dashboard"
if [[ ! -d "$dash/node_modules" || "$dash/package-lock.json" -nt "$dash/node_modules/.package-lock.json" ]]; then
  (cd "$dash" && npm ci --no-audit --no-fund --loglevel=error)
fi
if [[ ! -s "$dash/dist/index.html" ]] || [[ -n $(find "$dash/src" "$dash/build.mjs" -newer "$dash/dist/index.html" 2>/dev/null) ]]; then
  (cd "$dash" && npm run --silent build)
fi
# --- end of the dashboard block ---------------------------------------------

# The default corpus: the King James Bible, about 4.3 MB of text.
corpus="$here/data/kjv.txt"
if [[ ! -s "$corpus" ]]; then
  mkdir -p "$here/data"
  bible -l10000 gen1:1-rev22:21 > "$corpus.tmp"
  mv "$corpus.tmp" "$corpus"
  echo "setup: wrote $corpus ($(wc -c < "$corpus") bytes)"
fi
