# Shared by the device scripts (gpu_checks.sh, pipeline_matrix.sh), sourced from the checkout's root on the H200
# machine: the output folder, the libraries of the machine's Python `nvidia` packages and the unpacked .debs on the
# loader's path, and one bounded, timed, logged step.
out=${OUT:-/tmp/h3-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on the lent machines (the device tool's KINDS.md)
nv=$(python3 -c "import nvidia, os; print(nvidia.__path__[0])" 2>/dev/null || echo /nonexistent)
export LD_LIBRARY_PATH="$nv/cudnn/lib:$nv/nccl/lib:$nv/cublas/lib:/tmp/h3deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"

# run_step NAME LIMIT_S COMMAND...: runs the command under `timeout`, its output in $out/NAME.log; a line
# "== NAME rc=.. seconds" (TIMED OUT noted) on stdout and in $out/summary.txt, a JSON line in $out/steps.jsonl, the
# log's last $TAIL lines (default 8) on stdout. Returns the command's status.
run_step() {
  local name=$1 limit=$2
  shift 2
  local t0=$(date +%s%N)
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '== %-30s rc=%-3d %5d.%01d s%s\n' "$name" "$rc" $((ms / 1000)) $(((ms % 1000) / 100)) \
    "$([ $rc -eq 124 ] && echo "  (TIMED OUT at $limit s)")" | tee -a "$out/summary.txt"
  printf '{"step": "%s", "rc": %d, "seconds": %d.%03d, "limit_s": %d}\n' "$name" "$rc" $((ms / 1000)) $((ms % 1000)) \
    "$limit" >> "$out/steps.jsonl"
  tail -n "${TAIL:-8}" "$out/$name.log" | cut -c1-220
  return $rc
}
