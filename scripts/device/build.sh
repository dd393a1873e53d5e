#!/usr/bin/env bash
# Builds h3 (with the CUDA backend) on the GPU machine of the `device` tool: an Ubuntu 24.04 image with CUDA 13,
# cuDNN and NCCL inside its Python's `nvidia` packages, and no network. The few Debian packages it lacks
# (PCRE2 and utf8proc headers, OpenBLAS headers) travel as .deb files in $H3_DEBS and are unpacked under /tmp.
# Usage (from the checkout's root there): H3_DEBS=path/to/debs [H3_BENCH=ON] scripts/device/build.sh [build-dir]
# (H3_BENCH=ON also builds the bench/ programs, e.g. attention_fp8_check.)
set -euo pipefail
build=${1:-build-gpu}
deps=/tmp/h3deps
mkdir -p "$deps"
for f in "${H3_DEBS:?set H3_DEBS to the folder of .deb files}"/*.deb; do dpkg -x "$f" "$deps"; done
for pc in "$deps"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc; do sed -i "s#^prefix=/usr\$#prefix=$deps/usr#" "$pc"; done
nv=$(python3 -c "import nvidia, os; print(nvidia.__path__[0])")
export PKG_CONFIG_PATH="$deps/usr/lib/x86_64-linux-gnu/pkgconfig"
export LD_LIBRARY_PATH="$nv/cudnn/lib:$nv/nccl/lib:$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3_BENCH=${H3_BENCH:-OFF} \
  -DCMAKE_PREFIX_PATH="$deps/usr" \
  -DOPENBLAS_INCLUDE_DIR="$deps/usr/include/x86_64-linux-gnu/openblas-pthread" \
  -DCUDNN_INCLUDE_DIR="$nv/cudnn/include" -DCUDNN_LIBRARY="$nv/cudnn/lib/libcudnn.so.9" \
  -DNCCL_INCLUDE_DIR="$nv/nccl/include" -DNCCL_LIBRARY="$nv/nccl/lib/libnccl.so.2" > "$build.configure.log"
cmake --build "$build" -j "$(nproc)"
echo "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
