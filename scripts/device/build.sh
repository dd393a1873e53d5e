#!/usr/bin/env bash
# Builds h3 (with the CUDA backend) on the GPU machine of the `device` tool: an Ubuntu 24.04 image with CUDA 13,
# cuDNN and NCCL inside its Python's `nvidia` packages, and no network. The Debian 12 packages it lacks (PCRE2,
# utf8proc headers, SQLite and libmicrohttpd for h3 serve, FFmpeg's libraries with the runtime libraries
# they need: scripts/device/fetch_debs.sh builds the folder) travel as .deb files in $H3_DEBS and are unpacked
# under /tmp; the build requires all of them (-DH3_REQUIRE_FULL=ON; H3_REQUIRE_FULL=OFF builds without media/serve).
# Usage (from the checkout's root there): H3_DEBS=path/to/debs [H3_BENCH=ON] scripts/device/build.sh [build-dir]
# (H3_GOLDEN=DIR: the golden files' folder; H3_BENCH=ON also builds the bench/ programs, e.g. attention_wgmma_check;
# H3_TARGETS="h3 h3_tests" builds only those; H3_DEBS_EXTRA=folder supplies spdlog/fmt/json/CLI11/gtest .debs,
# unpacked only when the image lacks their headers.)
# The last line printed is the `export LD_LIBRARY_PATH=...` that running the binaries needs.
set -euo pipefail
build=${1:-build-gpu}
# The carried .debs unpacked under /tmp/h3deps ($deps), PKG_CONFIG_PATH and LD_LIBRARY_PATH pointing there.
. "$(dirname "$0")/unpack_debs.sh"
# OpenBLAS headers: the image's own (libopenblas-pthread-dev), or carried ones when it has none.
blas_inc=
if [ -e "$deps/usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h" ]; then
  blas_inc="$deps/usr/include/x86_64-linux-gnu/openblas-pthread"
fi
nv=$(python3 -c "import nvidia, os; print(nvidia.__path__[0])")
export LD_LIBRARY_PATH="$nv/cudnn/lib:$nv/nccl/lib:${LD_LIBRARY_PATH:-}"
# The golden files: ../shared/golden beside the checkout, else a carried copy (.golden, or $H3_GOLDEN); the GPU tests
# that need them are registered when a later configure finds them (cmake "$build" again once they are there).
golden=${H3_GOLDEN:-}
[ -n "$golden" ] || { [ -d ../shared/golden ] && golden=$(realpath ../shared/golden) || golden=$PWD/.golden; }
# The H200 only (sm_90a): no PTX for other GPUs, half the device code to compile (H3_CUDA_ARCHS overrides).
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3_BENCH=${H3_BENCH:-OFF} \
  -DH3_REQUIRE_FULL=${H3_REQUIRE_FULL:-ON} -DH3_GOLDEN="$golden" -DCMAKE_CUDA_ARCHITECTURES="${H3_CUDA_ARCHS:-90a}" \
  -DCMAKE_PREFIX_PATH="$deps/usr" \
  ${blas_inc:+-DOPENBLAS_INCLUDE_DIR="$blas_inc"} \
  -DCUDNN_INCLUDE_DIR="$nv/cudnn/include" -DCUDNN_LIBRARY="$nv/cudnn/lib/libcudnn.so.9" \
  -DNCCL_INCLUDE_DIR="$nv/nccl/include" -DNCCL_LIBRARY="$nv/nccl/lib/libnccl.so.2" > "$build.configure.log"
cmake --build "$build" -j "$(nproc)" ${H3_TARGETS:+--target $H3_TARGETS}
echo "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
