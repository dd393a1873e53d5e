#!/usr/bin/env bash
# Builds, on a Debian 12 machine with scripts/setup.sh's packages installed, the folders of .deb files that
# scripts/device/build.sh unpacks on the GPU machine (Ubuntu 24.04, no network):
#   DEBS   ($1, default .debs)        what the image lacks to build h3 with -DH3_REQUIRE_FULL=ON: PCRE2 and utf8proc
#                                     headers, SQLite and libmicrohttpd (h3 serve), FFmpeg's libraries
#                                     (libavformat/libavcodec/libavutil/libswscale/libswresample) and the runtime
#                                     libraries they need that the image does not have (x264 among them)
#   EXTRA  ($2, default .debs-extra)  spdlog/fmt/nlohmann-json/CLI11/gtest headers, unpacked only where the image
#                                     lacks them (H3_DEBS_EXTRA)
# The runtime closure is computed, not listed: every shared library unpacked so far is read for its NEEDED sonames,
# and a soname neither unpacked nor in the image (scripts/device/h200-image-sonames.txt: `ldconfig -p` of the image,
# from gpu-weights device request 1) brings in the Debian package that provides it here (dpkg -S), until nothing
# is missing. Debian 12's libraries run on Ubuntu 24.04's newer glibc; the image's own libraries are never carried
# (they would shadow newer ones on LD_LIBRARY_PATH).
# The -dev packages are repacked without their static archives (unused, ~9 MB). The call that carries the folder has
# 64 MiB for everything (the tree is ~7 MiB): the script prints the folders' sizes. While the GPU machine stays warm,
# an ignored folder carried once stays there for later calls (and build.sh's /tmp/h3deps too).
# Usage: scripts/device/fetch_debs.sh [DEBS_DIR] [EXTRA_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
debs=$(realpath -m "${1:-.debs}")
extra=$(realpath -m "${2:-.debs-extra}")
image_sonames=${H3_IMAGE_SONAMES:-$here/h200-image-sonames.txt}
[ -f "$image_sonames" ] || { echo "fetch_debs: $image_sonames is missing (the image's ldconfig -p sonames)" >&2; exit 1; }

# Headers, pkg-config files and link-time libraries h3 builds against that the image lacks (it has OpenBLAS, OpenSSL,
# zlib, GnuTLS, spdlog, fmt, nlohmann-json, CLI11 and GoogleTest with their headers; SQLite and PCRE2 without).
# FFmpeg's -dev packages depend only on each other and on their runtime libraries.
dev_packages=(
  libpcre2-dev libutf8proc-dev libsqlite3-dev libmicrohttpd-dev
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev
)
extra_packages=(libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev)

mkdir -p "$debs" "$extra"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

download() {  # download DIR PACKAGE...: the .debs of the versions installed here (what setup.sh built against)
  local dir=$1
  shift
  local p v specs=()
  for p in "$@"; do
    v=$(dpkg-query -W -f='${Version}' "$p" 2> /dev/null || true)
    if [ -z "$v" ]; then
      echo "fetch_debs: $p is not installed here; run scripts/setup.sh (or apt-get install $p) first" >&2
      exit 1
    fi
    specs+=("$p=$v")
  done
  (cd "$dir" && apt-get download -q "${specs[@]}" > "$work/apt.log" 2>&1) && return 0
  # One at a time: the installed version, else (superseded by a stable update: the same soname) the candidate.
  for p in "${specs[@]}"; do
    if ! (cd "$dir" && apt-get download -q "$p" > "$work/apt.log" 2>&1) &&
      ! (cd "$dir" && apt-get download -q "${p%%=*}" > "$work/apt.log" 2>&1); then
      cat "$work/apt.log" >&2
      echo "fetch_debs: apt-get download ${p%%=*} failed (installed ${p#*=})" >&2
      exit 1
    fi
  done
}

download "$debs" "${dev_packages[@]}"
download "$extra" "${extra_packages[@]}"

# Sonames the image has, and where this machine keeps each soname (to find the package providing it).
declare -A image=() local_lib=()
while read -r s; do image[$s]=1; done < <(awk '!/^#/ && NF {print $1}' "$image_sonames")
while read -r name path; do
  [ -n "${local_lib[$name]:-}" ] || local_lib[$name]=$path
done < <(ldconfig -p | awk 'NR > 1 && $1 ~ /\.so/ {print $1, $NF}')

# The closure: unpack, list what is needed, fetch the providers of what is missing, repeat.
root=$work/root
mkdir -p "$root"
missing=()
declare -A unpacked=()
for round in 1 2 3 4 5 6 7 8 9 10; do
  for f in "$debs"/*.deb; do
    [ -n "${unpacked[$f]:-}" ] || dpkg-deb -x "$f" "$root"
    unpacked[$f]=1
  done
  declare -A carried=()
  while read -r so; do carried[$(basename "$so")]=1; done < <(find "$root" -name '*.so*' \( -type f -o -type l \))
  missing=()
  want() { [ -n "${image[$1]:-}" ] || [ -n "${carried[$1]:-}" ] || missing+=("$1"); }
  # NEEDED sonames of every unpacked library.
  while read -r so; do
    while read -r need; do want "$need"; done < <(readelf -d "$so" 2> /dev/null | awk '/NEEDED/ {gsub(/[\[\]]/, "", $NF); print $NF}')
  done < <(find "$root" -name '*.so*' -type f)
  # A -dev package's libX.so link names its runtime library's file; that library's soname (the longest
  # libX.so.N[.M...] prefix this machine knows) must be carried or in the image (build.sh then points the link at
  # the image's copy).
  while read -r l; do
    [ -e "$l" ] && continue
    n=$(basename "$(readlink "$l")")
    while [[ "$n" == *.so.* ]] && [ -z "${local_lib[$n]:-}" ]; do n=${n%.*}; done
    if [[ "$n" == *.so.* ]]; then want "$n"; fi
  done < <(find "$root" -name '*.so' -type l)
  [ ${#missing[@]} -eq 0 ] && break
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  pkgs=()
  for need in "${missing[@]}"; do
    path=${local_lib[$need]:-}
    [ -n "$path" ] || { echo "fetch_debs: $need is needed but not on this machine to take its package from" >&2; exit 1; }
    pkg=$(dpkg -S "$(readlink -f "$path")" 2> /dev/null || dpkg -S "$path" 2> /dev/null || true)
    pkg=${pkg%%:*}
    [ -n "$pkg" ] || { echo "fetch_debs: no installed package owns $path ($need)" >&2; exit 1; }
    pkgs+=("$pkg")
  done
  mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
  echo "fetch_debs: round $round: ${#missing[@]} sonames missing (${missing[*]}) -> ${pkgs[*]}"
  download "$debs" "${pkgs[@]}"
done
[ ${#missing[@]} -eq 0 ] || { echo "fetch_debs: the closure did not settle: ${missing[*]}" >&2; exit 1; }
# The -dev packages repacked without their static archives (libavcodec.a alone is 21 MB): h3 links the shared
# libraries, and the carried folder shrinks by ~9 MB. Everything else in them (headers, .pc, links) is as shipped.
for f in "$debs"/*-dev_*.deb; do
  dpkg-deb -c "$f" > "$work/list"
  grep -q '\.a$' "$work/list" || continue
  rm -rf "$work/pkg"
  dpkg-deb -R "$f" "$work/pkg"
  find "$work/pkg" -name '*.a' -delete
  if [ -f "$work/pkg/DEBIAN/md5sums" ]; then
    grep -v '\.a$' "$work/pkg/DEBIAN/md5sums" > "$work/md5sums" || true
    mv "$work/md5sums" "$work/pkg/DEBIAN/md5sums"
  fi
  dpkg-deb -Zxz -b "$work/pkg" "$f" > /dev/null
done
echo "fetch_debs: $(ls "$debs"/*.deb | wc -l) packages in $debs ($(du -sh "$debs" | cut -f1)); $(ls "$extra"/*.deb | wc -l) in $extra ($(du -sh "$extra" | cut -f1), only for an image without those headers)"
