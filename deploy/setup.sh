#!/usr/bin/env bash
# Installs every Debian package troupe's build, tests and examples need, and
# prepares the default corpus. Idempotent; run as root (or with sudo available).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

packages=(
  build-essential cmake ninja-build pkg-config git
  libcaf-dev libyaml-cpp-dev libfmt-dev doctest-dev nlohmann-json3-dev
  libopenblas-dev libboost-dev libboost-system-dev libucx-dev
  bible-kjv
  chromium
)
# Extra packages for benchmarks only (large): `deploy/setup.sh --bench`.
bench_packages=(python3-torch python3-numpy hyperfine)

want=("${packages[@]}")
[[ " $* " == *" --bench "* ]] && want+=("${bench_packages[@]}")

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

# The default corpus: the King James Bible, about 4.3 MB of text.
corpus="$here/data/kjv.txt"
if [[ ! -s "$corpus" ]]; then
  mkdir -p "$here/data"
  bible -l10000 gen1:1-rev22:21 > "$corpus.tmp"
  mv "$corpus.tmp" "$corpus"
  echo "setup: wrote $corpus ($(wc -c < "$corpus") bytes)"
fi
