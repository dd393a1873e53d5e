#!/usr/bin/env bash
# The test command's set-up (scripts/test.sh), after scripts/setup.sh: what only the tests need. GoogleTest (the
# h3_tests binary), Python 3 (the h3 serve tests and the source checks), Chromium (the web page's headless tests),
# clang-format 14 (the formatting check), iproute2 and util-linux (`ip netns`,
# `unshare`: the simulated-host tests, tests/hosts/simhosts.sh), curl and jq (examples/curl.sh), Node.js and npm (examples/js with the
# official OpenAI SDK, and Playwright driving Chromium; the npm packages themselves come from the registry at test
# time), and Intel MKL's VML for the f64 golden test (scripts/setup-mkl.sh).
set -euo pipefail
here="$(dirname "$0")"
packages=(libgtest-dev libgmock-dev python3 chromium clang-format iproute2 util-linux curl jq)
# Debian's nodejs and npm, unless a node is already installed (NodeSource's carries its own npm, which Debian's npm
# package would conflict with).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then packages+=(nodejs npm); fi
"$here/install-packages.sh" setup-test "${packages[@]}"
"$here/setup-mkl.sh"
