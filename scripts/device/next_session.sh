#!/usr/bin/env bash
# Everything the open issues still need of the H200, as the device calls that run it, in the order to run them (each
# call under the device tool's 600 s limit; seconds expected from the last runs). Run the calls back to back on one
# warm machine: later calls use the build, the GEMM choices and the records of earlier ones (kept in /tmp on the
# machine). A session's 30 minutes hold calls 1-4; call 5 (mapped) takes the next session if the time is spent.
#   1  build, the streaming/budget GPU checks, tensor2 (issue 37: 2 ranks, 16 GiB each), bench-bf16 (issue 37: the
#      allocator counts; issue 40: the first joules per forward), the preview GPU tests (issue 39)       ~470
#   2  issue 39: 768p FP8 with and without previews every 10 steps, back to back, and the comparison     ~470
#   3  issue 37: 768p bf16 resident, then h3 serve under a 24 GiB card (two jobs, the second loads no DiT) ~400
#   4  issue 37: 768p bf16 under 24 GiB against call 3's resident run (the bound: <= 1.10x)                 ~340
#   5  issue 37: 768p FP8 from an FP8 file with host memory short (--host-memory 16G; the mapped source)    ~450
# Carry .debs, .golden (../shared/golden/qwen3vl-text-mini.safetensors) and .anchors in every call.
# Usage, from the checkout's root there: scripts/device/next_session.sh CALL
set -uo pipefail
export STOP_ON_FAIL=1 H3_DEBS=${H3_DEBS:-.debs}
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
  1)
    scripts/device/budget_matrix.sh build checks tensor2 bench-bf16
    preview gtest ;;
  2) preview plain previews compare ;;
  3) scripts/device/budget_matrix.sh gen768-bf16 serve24 ;;
  4) scripts/device/budget_matrix.sh gen768-bf16-24 ;;
  5) scripts/device/budget_matrix.sh mapped ;;
  *)
    echo "usage: scripts/device/next_session.sh 1|2|3|4|5 (see the header for what each call runs)" >&2
    exit 2 ;;
esac
