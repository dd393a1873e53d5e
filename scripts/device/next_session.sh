#!/usr/bin/env bash
# What the open issues still need of the GPU (an H100 or an H200: every run below fits 78 GiB), as the device calls
# that run it, in the order to run them (each call under the device tool's 600 s limit; seconds from the last runs).
# Run the calls back to back on one warm machine: later calls use the build, the GEMM choices and the records of
# earlier ones (kept in /tmp on the machine).
#   1  build, the streaming/budget/mapped GPU tests, 768p bf16 resident (issue 37)                          ~480
#   2  issue 37: 768p bf16 under 24 GiB against call 1's resident run (<= 1.10x: 1.212 with the exact-size
#      cache, the block pool's first run), then h3 serve under a 24 GiB card (the kept DiT's ring)         ~400
#   3  issue 37: 768p FP8 resident, then at 16 GiB (the plan's tightest card: the block pool at the cap)   ~400
#   4  issue 37: tensor2 (2 ranks, 16 GiB each; the tensor run against a bf16 run, versus 1-rank FP8)     ~180
#   5  issue 37 / 40: h3 bench bf16 resident and under 16 GiB, with the allocator's counts and joules    ~320
# Carry .debs and .golden (../shared/golden/qwen3vl-text-mini.safetensors) in every call; .anchors for the anchor.
# Usage, from the checkout's root there: scripts/device/next_session.sh CALL
set -uo pipefail
export STOP_ON_FAIL=build H3_DEBS=${H3_DEBS:-.debs}
case ${1:-} in
  1) scripts/device/budget_matrix.sh build gtests gen768-bf16 ;;
  2) scripts/device/budget_matrix.sh gen768-bf16-24 serve24 ;;
  3) scripts/device/budget_matrix.sh gen768-fp8-ref gen768-fp8-16 ;;
  4) scripts/device/budget_matrix.sh tensor2 ;;
  5) scripts/device/budget_matrix.sh bench-bf16 ;;
  *)
    echo "usage: scripts/device/next_session.sh 1|2|3|4|5 (see the header for what each call runs)" >&2
    exit 2 ;;
esac
