#!/usr/bin/env bash
# Issue 40's measurements on one board (an H200 when lent; every run fits an H100's 78 GiB), as the device calls that
# run them, in order, each under the device tool's 600 s limit (seconds expected; a fresh machine's start also costs
# device time: 80-480 s in the last sessions). Run them back to back on one warm machine: later calls use the build and
# the records of earlier ones (kept in /tmp on the machine).
#   1  build; the attention gtests and check; h3 bench 480p/768p bf16/FP8 (median of 3, isolated regions, joules);
#      diffusers' DiT beside it (perf_diffusers.py); ctest -L gpu                                            ~330
#   2  time to MP4: 768p bf16, 768p FP8, 480p FP8 (resident, 124 frames, 50 steps)                           ~490
#   3  time to MP4 480p bf16; h3 bench 480p bf16 over 40 forwards (the generator's 49 against bench's 3);
#      bench/mp4_tail under libx264's held-frame settings; the GEMM tuning's cost in a first forward           ~260
# Carry .debs, .anchors and .golden (../shared/golden/qwen3vl-text-mini.safetensors) in every call.
# Issue 37's calls (the small cards, tensor2) are budget_matrix.sh's steps: build gen768-fp8-ref gen768-fp8-16, then
# tensor2, then gtests tail bench-bf16 (docs/notes.md, "(lead, fifth part)").
# Usage, from the checkout's root there: scripts/device/next_session.sh CALL
set -uo pipefail
export STOP_ON_FAIL=build H3_DEBS=${H3_DEBS:-.debs}
case ${1:-} in
  1) scripts/device/budget_matrix.sh build attention bench-all anchor-resident gpu-ctest ;;
  2) scripts/device/budget_matrix.sh gen768-bf16 gen768-fp8-ref gen480-fp8-ref ;;
  3) scripts/device/budget_matrix.sh gen480-bf16 bench-sustained tail-x264 tune-cost ;;
  *)
    echo "usage: scripts/device/next_session.sh 1|2|3 (see the header for what each call runs)" >&2
    exit 2 ;;
esac
