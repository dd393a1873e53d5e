#!/usr/bin/env bash
# The README's test command: set up (the main job's packages, then the tests' own), build (CPU always; CUDA sources
# too when nvcc is present), check the formatting, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/setup-test.sh
scripts/format.sh --check
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DH3_REQUIRE_FULL=ON -DH3_TESTS=ON -DH3_BENCH=ON
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j2 --timeout 1200
