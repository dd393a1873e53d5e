#!/usr/bin/env bash
# Unpacks the parts of Intel MKL that h3 loads at run time (VML's exp/sin/cos, src/core/ref_math.h) from Debian's
# non-free archive into H3_MKL_DIR (default /opt/h3-deps/mkl), without touching the system's apt sources or its
# BLAS alternative. Optional: without it the engine uses libm and the f64 DiT golden test that needs VML's exact
# bits reports itself SKIPPED. Idempotent.
set -euo pipefail
dir="${H3_MKL_DIR:-/opt/h3-deps/mkl}"
lib="$dir/usr/lib/x86_64-linux-gnu"
# The runtime dispatcher, its sequential threading and LP64 interface layers, and the VML kernels per CPU family.
packages=(libmkl-rt libmkl-core libmkl-sequential libmkl-intel-lp64 libmkl-locale
          libmkl-vml-def libmkl-vml-mc3 libmkl-vml-avx2 libmkl-vml-avx512)
if [ -f "$lib/libmkl_rt.so" ] && [ -f "$lib/libmkl_vml_avx512.so" ]; then
  echo "setup-mkl: present in $dir ($(cat "$dir/VERSION" 2>/dev/null || echo unknown version))"
  exit 0
fi
if [ "$(dpkg --print-architecture)" != amd64 ]; then
  echo "setup-mkl: WARNING: Intel MKL is amd64 only; skipped"
  exit 0
fi
if ! mkdir -p "$dir" 2>/dev/null || [ ! -w "$dir" ]; then
  echo "setup-mkl: WARNING: cannot write $dir (run as root or set H3_MKL_DIR); Intel MKL skipped"
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
. /etc/os-release
echo "deb http://deb.debian.org/debian ${VERSION_CODENAME:-bookworm} non-free" >"$work/sources.list"
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
apt_opts=(-o "Dir::Etc::sourcelist=$work/sources.list" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$work/lists"
          -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
if ! apt-get "${apt_opts[@]}" -qq update || ! (cd "$work/debs" && apt-get "${apt_opts[@]}" -qq download "${packages[@]}"); then
  echo "setup-mkl: WARNING: could not fetch ${packages[*]} from Debian non-free; the f64 DiT will differ from the"
  echo "           reference by ~1e-8 and its strict golden test will be SKIPPED"
  exit 0
fi
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$dir"; done
dpkg-deb -f "$work"/debs/libmkl-rt_*.deb Version >"$dir/VERSION"
echo "setup-mkl: unpacked ${#packages[@]} packages (Intel MKL $(cat "$dir/VERSION")) into $dir"
