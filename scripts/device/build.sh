#!/usr/bin/env bash
# Builds h3 (with the CUDA backend) on the GPU machine of the `device` tool: an Ubuntu 24.04 image with CUDA 13,
# cuDNN and NCCL inside its Python's `nvidia` packages, and no network. The few Debian packages it lacks
# (PCRE2 and utf8proc headers, OpenBLAS headers) travel as .deb files in $H3_DEBS and are unpacked under /tmp.
# Usage (from the checkout's root there): H3_DEBS=path/to/debs [H3_BENCH=ON] scripts/device/build.sh [build-dir]
# (H3_BENCH=ON also builds the bench/ programs, e.g. attention_wgmma_check; H3_TARGETS="h3 h3_tests" builds only those;
# H3_DEBS_EXTRA=folder supplies spdlog/fmt/json/CLI11/gtest .debs, unpacked only when the image lacks their headers.)
set -euo pipefail
build=${1:-build-gpu}
deps=/tmp/h3deps
mkdir -p "$deps"
for f in "${H3_DEBS:?set H3_DEBS to the folder of .deb files}"/*.deb; do dpkg -x "$f" "$deps"; done
# Header-only or small libraries the image may lack: unpacked from $H3_DEBS_EXTRA only when the image has none.
if [ -n "${H3_DEBS_EXTRA:-}" ]; then
  for pair in spdlog:libspdlog fmt:libfmt nlohmann:nlohmann-json3 CLI:libcli11 gtest:libgtest gmock:libgmock; do
    hdr=${pair%%:*} pkg=${pair#*:}
    if [ ! -d "/usr/include/$hdr" ]; then
      for f in "$H3_DEBS_EXTRA"/"$pkg"*.deb; do
        if [ -e "$f" ]; then dpkg -x "$f" "$deps"; echo "build.sh: unpacked $(basename "$f")"; fi
      done
    fi
  done
fi
for pc in "$deps"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$deps"/usr/share/pkgconfig/*.pc; do
  if [ -e "$pc" ]; then sed -i "s#^prefix=/usr\$#prefix=$deps/usr#" "$pc"; fi
done
nv=$(python3 -c "import nvidia, os; print(nvidia.__path__[0])")
export PKG_CONFIG_PATH="$deps/usr/lib/x86_64-linux-gnu/pkgconfig"
export LD_LIBRARY_PATH="$nv/cudnn/lib:$nv/nccl/lib:$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3_BENCH=${H3_BENCH:-OFF} \
  -DCMAKE_PREFIX_PATH="$deps/usr" \
  -DOPENBLAS_INCLUDE_DIR="$deps/usr/include/x86_64-linux-gnu/openblas-pthread" \
  -DCUDNN_INCLUDE_DIR="$nv/cudnn/include" -DCUDNN_LIBRARY="$nv/cudnn/lib/libcudnn.so.9" \
  -DNCCL_INCLUDE_DIR="$nv/nccl/include" -DNCCL_LIBRARY="$nv/nccl/lib/libnccl.so.2" > "$build.configure.log"
cmake --build "$build" -j "$(nproc)" ${H3_TARGETS:+--target $H3_TARGETS}
echo "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
