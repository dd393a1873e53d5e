#!/usr/bin/env bash
# Issue 37's device runs (an H100 or an H200: every run below fits 78 GiB), as the device calls that run them, in the
# order to run them (each call under the device tool's 600 s limit; seconds from the last runs, on an H100; a fresh
# machine's start also costs device time: 80-300 s in the last sessions).
# Run the calls back to back on one warm machine: later calls use the build, the GEMM choices and the records of
# earlier ones (kept in /tmp on the machine).
#   1  build, then 768p FP8 resident and at 16 GiB (the plan's tightest card, with the block pool; <= 1.10x)  ~480
#   2  tensor2 (2 ranks sharing the GPU, 16 GiB each; the tensor run against a bf16 run, versus 1-rank FP8;
#      bench-comm first)                                                                                    ~110
#   3  the streaming/budget/mapped GPU tests, issue 40's tail probe (768p FP8 2 steps with --profile-regions 1,
#      bench/mp4_tail on the host), h3 bench bf16 resident and under 16 GiB (allocator counts, joules)      ~115
# All three ran at 1ba798b on an H100 (docs/notes.md, "(lead, fifth part)"): 1.004x; tensor2 0.999x of its bound's
# base (one DiT call 35.6 s); they close issue 37 and stay here to re-check it after changes to streaming.
# Done before: 768p bf16 at 24 GiB 1.000x with the block pool; serve24's second job loads no DiT.
# Carry .debs and .golden (../shared/golden/qwen3vl-text-mini.safetensors) in every call; .anchors for the anchor.
# Usage, from the checkout's root there: scripts/device/next_session.sh CALL
set -uo pipefail
export STOP_ON_FAIL=build H3_DEBS=${H3_DEBS:-.debs}
case ${1:-} in
  1) scripts/device/budget_matrix.sh build gen768-fp8-ref gen768-fp8-16 ;;
  2) scripts/device/budget_matrix.sh tensor2 ;;
  3) scripts/device/budget_matrix.sh gtests tail bench-bf16 ;;
  *)
    echo "usage: scripts/device/next_session.sh 1|2|3 (see the header for what each call runs)" >&2
    exit 2 ;;
esac
