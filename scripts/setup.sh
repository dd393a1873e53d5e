#!/usr/bin/env bash
# The main command's set-up (scripts/main.sh): the Debian packages h3 builds and runs against, and nothing the
# tests alone need (those are scripts/setup-test.sh's). The CUDA toolkit is optional and not installed here: when
# nvcc is on the machine, CMake builds the CUDA backend too.
set -euo pipefail
packages=(
  build-essential cmake pkg-config
  libopenblas-dev libopenmpi-dev openmpi-bin
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libpcre2-dev libutf8proc-dev
  libavcodec-dev libavformat-dev libavutil-dev libswscale-dev libswresample-dev
  libmicrohttpd-dev libsqlite3-dev
)
"$(dirname "$0")/install-packages.sh" setup "${packages[@]}"
