#!/usr/bin/env bash
# Unpacks the parts of Intel MKL that h3 loads at run time (VML's exp/sin/cos, src/core/ref_math.h) into H3_MKL_DIR
# (default /opt/h3-deps/mkl). Run by the test command's set-up (scripts/setup-test.sh) alone: MKL is non-free and is
# only there so that the f64 DiT golden test matches the reference's f32 `cos` bit for bit; without it the engine
# uses libm and that test reports itself SKIPPED. Idempotent.
#
# Where from: the machine's own apt sources. The archive and release are the ones apt already uses for this system
# (read through `apt-get indextargets`, which understands sources.list and the deb822 .sources files alike), with
# the one component that holds MKL added for this download only (Debian: non-free, Ubuntu: multiverse). The
# packages are fetched with a private sources list and cache and unpacked with dpkg-deb: the system's apt sources,
# its package database and its BLAS alternative are left as they were.
set -euo pipefail
dir="${H3_MKL_DIR:-/opt/h3-deps/mkl}"
lib="$dir/usr/lib/x86_64-linux-gnu"
# The runtime dispatcher, its sequential threading and LP64 interface layers, and the VML kernels per CPU family.
packages=(libmkl-rt libmkl-core libmkl-sequential libmkl-intel-lp64 libmkl-locale
          libmkl-vml-def libmkl-vml-mc3 libmkl-vml-avx2 libmkl-vml-avx512)
skip() {
  echo "setup-mkl: WARNING: $*; Intel MKL skipped: the f64 DiT will differ from the reference by ~1e-8 and its"
  echo "           strict golden test will be SKIPPED"
  exit 0
}
if [ -f "$lib/libmkl_rt.so" ] && [ -f "$lib/libmkl_vml_avx512.so" ]; then
  echo "setup-mkl: present in $dir ($(cat "$dir/VERSION" 2>/dev/null || echo unknown version))"
  exit 0
fi
[ "$(dpkg --print-architecture)" = amd64 ] || skip "Intel MKL is amd64 only"
if ! mkdir -p "$dir" 2>/dev/null || [ ! -w "$dir" ]; then skip "cannot write $dir (run as root or set H3_MKL_DIR)"; fi

. /etc/os-release
case " ${ID:-} ${ID_LIKE:-} " in
  *" ubuntu "*) component=multiverse ;;
  *" debian "*) component=non-free ;;
  *) skip "not a Debian or Ubuntu system (ID=${ID:-unknown}): no archive to take libmkl-* from" ;;
esac
# The release's own binary source: suite = the release's codename (not -updates, -security, -backports); on a
# machine whose os-release names no codename, the first suite without such a suffix.
targets="$(apt-get indextargets --format '$(TARGET_OF) $(IDENTIFIER) $(REPO_URI) $(RELEASE)' 2>/dev/null)" ||
  skip "apt-get indextargets failed: cannot read this machine's apt sources"
source_line="$(awk -v c="${VERSION_CODENAME:-}" '$1 == "deb" && $2 == "Packages" && $4 == c { print $3, $4; exit }' \
  <<<"$targets")"
if [ -z "$source_line" ]; then
  source_line="$(awk '$1 == "deb" && $2 == "Packages" && $4 !~ /-/ { print $3, $4; exit }' <<<"$targets")"
fi
[ -n "$source_line" ] || skip "no binary source of the release itself in this machine's apt sources"
read -r uri suite <<<"$source_line"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "deb $uri $suite $component" >"$work/sources.list"
echo "setup-mkl: fetching ${#packages[@]} packages from $uri $suite $component (this machine's archive)"
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
apt_opts=(-o "Dir::Etc::sourcelist=$work/sources.list" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$work/lists"
          -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
if ! apt-get "${apt_opts[@]}" -qq update ||
  ! (cd "$work/debs" && apt-get "${apt_opts[@]}" -qq download "${packages[@]}"); then
  skip "could not fetch ${packages[*]} from $uri $suite $component"
fi
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$dir"; done
dpkg-deb -f "$work"/debs/libmkl-rt_*.deb Version >"$dir/VERSION"
echo "setup-mkl: unpacked ${#packages[@]} packages (Intel MKL $(cat "$dir/VERSION")) into $dir"
