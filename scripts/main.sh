#!/usr/bin/env bash
# The README's main command: set up, build, and run the main job on a model that needs no download.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target h3
build/bin/h3 forward "$@"
