#!/usr/bin/env bash
# The README's main command: set up, build, and run the main job (h3 generate) on models that need no download.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Only the h3 program: the tests and benchmarks (and what they need, scripts/setup-test.sh) are the test command's.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DH3_REQUIRE_FULL=ON -DH3_TESTS=OFF -DH3_BENCH=OFF >/dev/null
cmake --build build -j"$(nproc)" --target h3
# Prompt to MP4 on the procedural mini models (no download) over 2 CPU ranks; any arguments replace these.
if [ $# -eq 0 ]; then
  set -- --prompt "a lighthouse on a cliff at dusk, waves crashing below, gulls calling over the wind" \
    --width 128 --height 128 --steps 8 --seed 1 -o build/h3-main.mp4
fi
build/bin/h3 --ranks 2 generate "$@"
