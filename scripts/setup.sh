#!/usr/bin/env bash
# Installs the Debian packages h3-engine builds against (idempotent; skips apt when everything is present).
# The CUDA toolkit is optional and not installed here: when nvcc is on the machine, CMake builds the CUDA backend.
set -euo pipefail
packages=(
  build-essential cmake pkg-config
  libopenblas-dev libopenmpi-dev openmpi-bin
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libpcre2-dev libutf8proc-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libavcodec-dev libavformat-dev libavutil-dev libswscale-dev libswresample-dev
  libmicrohttpd-dev libsqlite3-dev python3 chromium clang-format
)
# Intel MKL's VML from Debian non-free, unpacked beside the system (optional; see scripts/setup-mkl.sh).
"$(dirname "$0")/setup-mkl.sh"
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
