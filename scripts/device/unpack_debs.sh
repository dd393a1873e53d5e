#!/usr/bin/env bash
# Unpacks the carried Debian packages on the GPU machine (sourced by scripts/device/build.sh; run alone it prints the
# exports): $H3_DEBS (scripts/device/fetch_debs.sh) always, $H3_DEBS_EXTRA's header-only packages only where the
# image lacks their headers. Files land under $deps (/tmp/h3deps); pkg-config files and the -dev packages' library
# links are pointed there (or at the image's copy of a runtime library it has), and PKG_CONFIG_PATH and
# LD_LIBRARY_PATH are exported.
deps=${H3_DEPS_DIR:-/tmp/h3deps}
mkdir -p "$deps"
for f in "${H3_DEBS:?set H3_DEBS to the folder of .deb files}"/*.deb; do dpkg -x "$f" "$deps"; done
# Header-only or small libraries the image may lack: unpacked from $H3_DEBS_EXTRA only when the image has none.
if [ -n "${H3_DEBS_EXTRA:-}" ]; then
  for pair in spdlog:libspdlog fmt:libfmt nlohmann:nlohmann-json3 CLI:libcli11 gtest:libgtest gmock:libgmock; do
    hdr=${pair%%:*} pkg=${pair#*:}
    if [ ! -d "/usr/include/$hdr" ]; then
      for f in "$H3_DEBS_EXTRA"/"$pkg"*.deb; do
        if [ -e "$f" ]; then dpkg -x "$f" "$deps"; echo "unpack_debs: unpacked $(basename "$f")"; fi
      done
    fi
  done
fi
# pkg-config files name /usr in prefix=, and FFmpeg's also in libdir= / includedir=: all point under $deps.
for pc in "$deps"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$deps"/usr/share/pkgconfig/*.pc; do
  if [ -e "$pc" ]; then sed -i -E "s#^([A-Za-z_]+)=/usr(/|\$)#\1=$deps/usr\2#" "$pc"; fi
  # Requires.private matters only to static links, and pkg-config refuses a module whose private requirement has
  # no .pc here (libmicrohttpd names gnutls; the image has libgnutls.so.30 but not its -dev package).
  if [ -e "$pc" ]; then sed -i -E "/^Requires\.private:/d" "$pc"; fi
done
# A -dev package's libX.so links to its runtime library by file name; where the image has that library (same
# soname) instead of the .debs, point the link at the image's copy.
image_libs=$(ldconfig -p | awk 'NR > 1 {print $1, $NF}')
for l in "$deps"/usr/lib/x86_64-linux-gnu/*.so; do
  if [ -L "$l" ] && [ ! -e "$l" ]; then
    n=$(basename "$(readlink "$l")")
    while [[ "$n" == *.so.* ]]; do
      hit=$(awk -v n="$n" '$1 == n && !f {print $2; f = 1}' <<< "$image_libs")
      if [ -n "$hit" ]; then
        ln -sf "$hit" "$l"
        break
      fi
      n=${n%.*}
    done
  fi
done
export PKG_CONFIG_PATH="$deps/usr/lib/x86_64-linux-gnu/pkgconfig:$deps/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  echo "export PKG_CONFIG_PATH=$PKG_CONFIG_PATH"
  echo "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
fi
