#!/bin/sh
# Runs a GPU test command when this machine has an NVIDIA GPU; otherwise reports the test SKIPPED (exit 77), loudly.
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIPPED LOUDLY: no NVIDIA GPU on this machine (GPU tests run on the device machine): $*"
  exit 77
fi
exec "$@"
