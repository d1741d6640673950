#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Formats every tracked C++ file with clang-format and the repository's .clang-format;
# --check changes nothing and fails, listing the files, when one is not formatted.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

clang_format=${CLANG_FORMAT:-clang-format}
if ! command -v "$clang_format" >/dev/null; then
  echo "format.sh: $clang_format not found (Debian: apt-get install clang-format)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files '*.cpp' '*.hpp')
if [[ ${1:-} == --check ]]; then
  bad=()
  for f in "${files[@]}"; do
    if ! "$clang_format" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
  done
  if ((${#bad[@]} > 0)); then
    echo "format.sh: not formatted (run scripts/format.sh): ${bad[*]}" >&2
    exit 1
  fi
  echo "format.sh: ${#files[@]} files formatted"
else
  "$clang_format" --style=file -i "${files[@]}"
fi
