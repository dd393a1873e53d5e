#!/usr/bin/env bash
# Installs the Debian packages named after the first argument (a label for the log) that are not installed yet.
# Idempotent: no apt call at all when every package is present. Used by setup.sh (the main job's packages) and
# setup-test.sh (what only the tests need). Needs root or sudo when something is missing.
set -euo pipefail
label=$1
shift
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "$label: all $# packages present"
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "$label: installing ${missing[*]}"
$sudo apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
