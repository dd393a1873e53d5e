#!/usr/bin/env bash
# Formats the C++/CUDA sources with the committed .clang-format (clang-format 14, Debian 12's), or with --check
# fails listing the files that differ (what CI runs). Generated files are left as their generator writes them.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | grep -v -x -F -f scripts/format-generated.txt)
if [ "${1:-}" = "--check" ]; then
  clang-format --dry-run -Werror "${files[@]}"
  echo "format: ${#files[@]} files match .clang-format"
else
  clang-format -i "${files[@]}"
fi
