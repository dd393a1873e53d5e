#!/usr/bin/env bash
# Issue 24's Done-when matrix on one H200: prompt to MP4 with `procedural:full` (every component at the released
# shapes, no download), 124 frames, 50 steps, each run's record written with --json, then checked by
# pipeline_matrix_summary.py against the targets (time to MP4 without loads: 768p FP8 <= 175 s, bf16 <= 272 s; 480p
# FP8 <= 45 s, bf16 <= 72 s; 768p bf16 peak <= 100 GB in every phase).
# Two steps, each sized for one 10-minute device command after `gpu_checks.sh build` (see the budget below):
#   m768   768p FP8, then 768p bf16                                   (~210 s + ~310 s)
#   m480   an FP8 checkpoint of procedural:full written to local disk, 480p FP8 loaded from it (load time and GB/s),
#          480p bf16, and `h3 serve` with FP8 resident: two 480p jobs, the second's timings without load
#                                                                      (~60 + ~100 + ~110 + ~140 s)
#   tests  the GPU ctest entries of the whole job (FP8 per-layer rule, pipeline verify bf16 / f32, generate on 1-3
#          ranks byte-identical, serve FP8 resident)                  (~2 min)
# Budget: 49 DiT calls a run at 0.843 / 3.385 s (FP8) and 1.370 / 5.332 s (bf16) at 480p / 768p, plus encode,
# decode, mux and the loads (the DiT and the text tower generated on the device, the VAE decoders on the host).
# Usage, from the checkout's root on the device (after `scripts/device/gpu_checks.sh build`):
#   scripts/device/pipeline_matrix.sh m768        (first command)
#   scripts/device/pipeline_matrix.sh m480 tests  (second command)
# Results: $OUT/<run>.json (records), $OUT/matrix.txt (the table), $OUT/summary.txt, $OUT/all-logs.txt.
# H3_MATRIX_EMBEDDINGS=1: precomputed prompt embeddings instead of the text tower (when the full-size tower is not in
# the build yet; the encode phase is then not measured).
set -uo pipefail
out=${OUT:-/tmp/h3-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
nv=$(python3 -c "import nvidia, os; print(nvidia.__path__[0])")
export LD_LIBRARY_PATH="$nv/cudnn/lib:$nv/nccl/lib:$nv/cublas/lib:/tmp/h3deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
h3=${H3_BIN:-build-gpu/bin/h3}
ckpt_dir=${H3_CKPT_DIR:-$PWD/.h3-ckpt}
step() {  # step NAME LIMIT_S COMMAND...
  local name=$1 limit=$2
  shift 2
  local t0=$(date +%s%N)
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '== %-26s rc=%-3d %5d.%01d s\n' "$name" "$rc" $((ms / 1000)) $(((ms % 1000) / 100)) | tee -a "$out/summary.txt"
  tail -n "${TAIL:-8}" "$out/$name.log" | cut -c1-220
}
prompt='a red kite over a windy beach at dusk, waves breaking, gulls calling'
extra=()
if [ "${H3_MATRIX_EMBEDDINGS:-0}" = 1 ]; then
  python3 - "$out/embeds.safetensors" <<'PY'
import json, struct, sys, random
rows, width = 120, 5120  # a 768p prompt's length, the DiT's text width
random.seed(7)
data = struct.pack("<%df" % (rows * width), *[random.gauss(0, 1) for _ in range(rows * width)])
head = json.dumps({"prompt_embeds": {"dtype": "F32", "shape": [rows, width], "data_offsets": [0, len(data)]}}).encode()
head += b" " * (-len(head) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(head)) + head + data)
PY
  extra=(--embeddings "$out/embeds.safetensors")
fi
gen() {  # gen NAME LIMIT_S W H PRECISION [more generate flags]
  local name=$1 limit=$2 w=$3 h=$4 p=$5
  shift 5
  TAIL=14 step "$name" "$limit" "$h3" --device cuda generate --model procedural:full --prompt "$prompt" --width "$w" \
    --height "$h" --frames 124 --steps 50 --seed 1 --precision "$p" "${extra[@]}" --json "$out/$name.json" \
    -o "$out/$name.mp4" "$@"
  rm -f "$out/$name.mp4"  # the MP4 was written (the record says so); it need not travel back
}
for s in "$@"; do
  case $s in
    m768)
      gen gen768-fp8 280 1344 768 fp8
      gen gen768-bf16 380 1344 768 bf16 ;;
    m480)
      # An FP8 checkpoint on the device's local disk, then a run that loads the DiT from it (the page cache dropped
      # first when this user may: otherwise the load reads memory, and the log says so).
      mkdir -p "$ckpt_dir"
      TAIL=4 step convert-fp8 150 "$h3" --device cuda convert procedural:full --quant fp8 -o "$ckpt_dir/dit-fp8.safetensors"
      sync
      if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then echo "page cache dropped"; else
        echo "cannot drop the page cache (not root): the checkpoint load below reads memory, not the disk"; fi |
        tee -a "$out/summary.txt"
      if [ -s "$ckpt_dir/dit-fp8.safetensors" ]; then
        gen gen480-fp8 160 832 480 fp8 --dit "$ckpt_dir/dit-fp8.safetensors"
      else
        gen gen480-fp8 140 832 480 fp8
      fi
      rm -rf "$ckpt_dir"
      gen gen480-bf16 170 832 480 bf16
      TAIL=20 step serve-fp8 240 python3 scripts/device/serve_two_jobs.py "$h3" "$out/serve-fp8.json" \
        --model-dir procedural:full --precision fp8 --width 832 --height 480 ;;
    tests)
      TAIL=30 step pipeline-ctest 300 ctest --test-dir build-gpu -R 'gpu\.(fp8_layers|verify\.pipeline|generate|serve)' \
        --output-on-failure ;;
    *) echo "unknown step $s" ;;
  esac
done
python3 scripts/device/pipeline_matrix_summary.py "$out" | tee "$out/matrix.txt"
rm -f "$out/embeds.safetensors"
# The device tool brings back at most 8 files: the logs travel as one (each under its step's header).
for f in "$out"/*.log; do
  [ -e "$f" ] || continue
  { echo "######## $(basename "$f" .log)"; cat "$f"; } >> "$out/all-logs.txt"
  rm -f "$f"
done
cat "$out/summary.txt"
