#!/usr/bin/env bash
# Every C++ and CUDA source of the tree is formatted as .clang-format says (#25 item 7),
# so formatting is never a review topic. Prints each file that differs and the
# command that fixes them all.
# Usage: clang_format.sh SOURCE_DIR
set -euo pipefail
src=$1
cd "$src"
tool=$(command -v clang-format || true)
[[ -n $tool ]] || { echo "FAIL: clang-format is not installed (deploy/setup.sh --test installs it)" >&2; exit 1; }
# Another major version lays some constructs out differently; the house style is 14's.
major=$("$tool" --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
if [[ $major != 14 ]]; then
  echo "skipped: clang-format $major is not the house's 14 (Debian bookworm's)"
  exit 77
fi

files() { # the sources: tracked files in a checkout, else every one outside build folders
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -- '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh'
  else
    find . \( -name 'build*' -o -name node_modules -o -name '.*' \) -prune -o -type f \
      \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print | sed 's|^\./||'
  fi | grep -v '/node_modules/' | sort
}

mapfile -t all < <(files)
((${#all[@]} > 100)) || { echo "FAIL: found only ${#all[@]} sources under $src" >&2; exit 1; }
bad=()
for f in "${all[@]}"; do
  "$tool" --dry-run -Werror --ferror-limit=1 "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  printf 'not formatted: %s\n' "${bad[@]}" >&2
  echo "FAIL: ${#bad[@]} of ${#all[@]} sources differ from .clang-format; fix with:" >&2
  echo "  git ls-files '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh' | xargs clang-format -i" >&2
  exit 1
fi
echo "${#all[@]} sources formatted as .clang-format says"
