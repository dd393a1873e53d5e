#!/usr/bin/env bash
# The test command's set-up (scripts/test.sh), after scripts/setup.sh: what only the tests need. GoogleTest (the
# h3_tests binary), Python 3 (the h3 serve tests and the source checks), Chromium (the web page's headless test),
# clang-format 14 (the formatting check), and Intel MKL's VML for the f64 golden test (scripts/setup-mkl.sh).
set -euo pipefail
here="$(dirname "$0")"
packages=(libgtest-dev libgmock-dev python3 chromium clang-format)
"$here/install-packages.sh" setup-test "${packages[@]}"
"$here/setup-mkl.sh"
