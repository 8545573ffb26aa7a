#!/usr/bin/env bash
# Checks that every tracked C++/CUDA source is formatted as .clang-format says (clang-format 14,
# Debian 12's); exits 1 listing the files that are not. `--fix` formats them in place instead.
# The tree was formatted once (review F9), so any file a change leaves unformatted fails CI.
#
#   tools/check_format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
mode=check
[[ ${1:-} == --fix ]] && mode=fix
command -v clang-format >/dev/null || { echo "$0: clang-format is not installed (tools/setup.sh installs it)" >&2; exit 2; }
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- '*.cc' '*.h' '*.cu')
else
  mapfile -t files < <(find . -path ./build\* -prune -o \( -name '*.cc' -o -name '*.h' -o -name '*.cu' \) -print | sed 's|^\./||')
fi
if [[ $mode == fix ]]; then
  clang-format -i --style=file "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --style=file --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  printf '%s\n' "${bad[@]}" >&2
  echo "$0: ${#bad[@]} file(s) above are not formatted (.clang-format): run tools/check_format.sh --fix" >&2
  exit 1
fi
echo "format: ${#files[@]} files formatted as .clang-format says"
