#!/usr/bin/env bash
# Everything the open issues still need of the H200 (or an H100: every run below fits 78 GiB), as the device calls
# that run it, in the order to run them (each call under the device tool's 600 s limit; seconds expected from the last
# runs). Run the calls back to back on one warm machine: later calls use the build, the GEMM choices and the records
# of earlier ones (kept in /tmp on the machine). The order puts issue 37's riskiest bound (768p bf16 at 24 GiB) first,
# so that call 2's answer decides call 3: issue 37's last three steps if the bound holds, else issue 39's overhead.
#   1  build, the streaming/budget/mapped GPU tests, 768p bf16 resident (issue 37)                          ~500
#   2  issue 37: 768p bf16 under 24 GiB against call 1's resident run (<= 1.10x); the preview GPU tests
#      (issue 39); an 8-block bench under 10 GiB with the first joules per forward (issue 40)             ~430
#   3  issue 37: tensor2 (2 ranks, 16 GiB each), h3 serve under a 24 GiB card (two jobs, the second loads no
#      DiT), 768p FP8 from an FP8 file with host memory short (--host-memory 16G; the mapped source)      ~470
#   4  issue 39: 768p FP8 with and without previews every 10 steps, back to back, and the comparison     ~470
#   5  issue 37 / 40: h3 bench bf16 resident and under 16 GiB, with the allocator's counts and joules    ~320
# Carry .debs and .golden (../shared/golden/qwen3vl-text-mini.safetensors) in every call; .anchors for the anchor.
# Usage, from the checkout's root there: scripts/device/next_session.sh CALL
set -uo pipefail
export STOP_ON_FAIL=build H3_DEBS=${H3_DEBS:-.debs}
final=${OUT:-/tmp/h3-out}
pv=/tmp/h3-preview  # the preview runs' folder on the machine; what comes back is copied from it (the device tool
                    # brings back few files: the summary, the two records and the last preview picture)
preview() {
  OUT=$pv scripts/device/preview_overhead.sh "$@"
  cp -f "$pv/summary.txt" "$final/preview-summary.txt" 2> /dev/null
  cp -f "$pv/plain.json" "$pv/previews.json" "$final/" 2> /dev/null
  local last=$(ls "$pv/previews"/*.png 2> /dev/null | tail -n 1)
  [ -z "$last" ] || cp -f "$last" "$final/preview-last.png"
}
case ${1:-} in
  1) scripts/device/budget_matrix.sh build gtests gen768-bf16 ;;
  2)
    scripts/device/budget_matrix.sh gen768-bf16-24 bench-smoke
    preview gtest ;;
  3) MAPPED_STEPS=${MAPPED_STEPS:-6} scripts/device/budget_matrix.sh tensor2 serve24 mapped ;;
  4) preview plain previews compare ;;
  5) scripts/device/budget_matrix.sh bench-bf16 ;;
  *)
    echo "usage: scripts/device/next_session.sh 1|2|3|4|5 (see the header for what each call runs)" >&2
    exit 2 ;;
esac
