#!/usr/bin/env bash
# The README's test command: set up, build (CPU always; CUDA sources too when nvcc is present), run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/format.sh --check
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DH3_REQUIRE_FULL=ON
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j2 --timeout 1200
