#!/usr/bin/env bash
# Issue 24 on one H200 (the `device` tool's machine): the build, the GPU correctness checks of its Done-when, and the
# whole-job matrix -- prompt to MP4 with `procedural:full` (every component at the released shapes, generated on the
# device, no download), 124 frames, 50 steps, each run's record written with --json and checked by
# pipeline_matrix_summary.py against the targets (time to MP4 without loads: 768p FP8 <= 175 s, bf16 <= 272 s; 480p
# FP8 <= 45 s, bf16 <= 72 s; 768p bf16 peak <= 100 GB in every phase) -- and `h3 serve` with FP8 resident.
#
# Every step runs under its own time limit, so a failing or slow step cannot stop the others; each writes its raw
# output (folded into $OUT/all-logs.txt as soon as it ends: the tool brings back 8 files) and a line to
# $OUT/summary.txt; $OUT/summary.json holds every step (rc, seconds), every run record and the verdicts, and
# $OUT/matrix.txt the table, both rewritten after each step so a command cut short still returns what it finished.
# Steps (seconds: expected on the H200 with 16 cores; each bounded by its own limit):
#   build          unpack the carried .debs (H3_DEBS, default .debs), build h3 and h3_tests for sm_90a only    ~150-200
#   checks         the Done-when checks needing no golden file: gpu.fp8_layers, gpu.generate.ranks (1-3 ranks
#                  sharing the GPU, byte-identical latents, bf16 and FP8), gpu.verify.qwen-text-fullwidth.{bf16,
#                  f32,bf16.n2} (the text tower at the released width: bf16 within 1.5x transformers' own error,
#                  f32 within 1e-5), gpu.verify.qwen3vl-vision.*, gpu.cuda_text; CudaLoader.* (staged loads, the
#                  DiT/VAEs read to the GPU, convert on the GPU); media (ldd, a mini prompt to MP4 on the GPU)   ~250
#   golden-checks  the checks on golden files (carried .golden; reconfigures to register them):
#                  gpu.verify.pipeline_t2va.{bf16,f32}, gpu.verify.qwen-text.f32 (qwen3vl-text-mini f32, 1e-5)  ~60-90
#   smoke          procedural:full prompt to MP4 at 480p, 22 frames, 2 steps, bf16 (optional insurance)        ~60
#   gen768-fp8     768p FP8                                                                                  ~200-230
#   gen768-bf16    768p bf16                                                                                 ~290-320
#   gen480-fp8     h3 convert procedural:full to an FP8 checkpoint on the local disk (on the GPU), the page
#                  cache dropped when allowed, 480p FP8 with the DiT loaded from it (load seconds and GB/s)  ~120-150
#   gen480-bf16    480p bf16                                                                                 ~90-110
#   serve          h3 serve --precision fp8 (memory plan auto: models resident), two short 480p jobs (124
#                  frames, 3 steps): the second job's timings hold no load                                 ~70-100
#   bench          h3 --device cuda bench at 480p / 768p, bf16 / FP8, median of 3 (docs/performance.md)   ~90
#   gpu-ctest      every GPU ctest entry (ctest -L gpu), as long as its limit allows                       <=300
# A device command is at most 600 s and the machine stays warm (its build kept) only when the next command follows
# at once: three calls back to back, (1) `build checks serve` carrying .debs (scripts/device/fetch_debs.sh),
# (2) `golden-checks gen768-fp8 gen480-fp8` carrying .golden (a copy of shared/golden: the tree, the .debs and the
# golden files together pass the 64 MiB a call carries), (3) `gen768-bf16 gen480-bf16` carrying nothing.
# Usage, from the checkout's root there: scripts/device/pipeline_matrix.sh STEP...
set -uo pipefail
source scripts/device/common.sh
bdir=${H3_BUILD_DIR:-build-gpu}
h3=${H3_BIN:-$bdir/bin/h3}
ckpt_dir=${H3_CKPT_DIR:-$PWD/.h3-ckpt}
golden=${H3_GOLDEN:-}
[ -n "$golden" ] || { [ -d ../shared/golden ] && golden=$(realpath ../shared/golden) || golden=$PWD/.golden; }
step() {  # step NAME LIMIT_S COMMAND...: run_step (scripts/device/common.sh), then the log folded in
  run_step "$@"
  local rc=$? name=$1
  # Folded in now, so that what a step leaves is complete even if the device command is cut short later: the log
  # into all-logs.txt, the step and any run record into summary.json (the tool brings back 8 files).
  { echo "######## $name (rc $rc)"; cat "$out/$name.log"; } >> "$out/all-logs.txt"
  rm -f "$out/$name.log"
  python3 scripts/device/pipeline_matrix_summary.py "$out" > "$out/matrix.txt" 2>&1
  return $rc
}
prompt='a red kite over a windy beach at dusk, waves breaking, gulls calling'
gen() {  # gen NAME LIMIT_S W H PRECISION [more generate flags]: one whole job, its record in $OUT/NAME.json
  local name=$1 limit=$2 w=$3 h=$4 p=$5
  shift 5
  TAIL=16 step "$name" "$limit" "$h3" --device cuda generate --model procedural:full --prompt "$prompt" --width "$w" \
    --height "$h" --frames "${FRAMES:-124}" --steps "${STEPS:-50}" --seed 1 --precision "$p" --json "$out/$name.json" \
    -o "$out/$name.mp4" "$@"
  rm -f "$out/$name.mp4"  # the record says whether the MP4 was written; the file need not travel back
}
ctest_step() {  # ctest_step NAME LIMIT_S REGEX
  TAIL=${TAIL:-40} step "$1" "$2" ctest --test-dir "$bdir" -L gpu -R "$3" --timeout 300 --no-tests=error --output-on-failure
}
for s in "$@"; do
  case $s in
    build)
      TAIL=15 step build 480 env H3_DEBS="${H3_DEBS:-.debs}" H3_GOLDEN="$golden" H3_TARGETS="h3 h3_tests" \
        scripts/device/build.sh "$bdir" ;;
    checks)  # the Done-when checks that need no golden file (the build call carries .debs, no room for .golden)
      TAIL=12 ctest_step check-fp8-layers 120 '^gpu\.fp8_layers$'
      TAIL=20 ctest_step check-generate-ranks 240 '^gpu\.generate\.ranks$'
      TAIL=20 ctest_step check-text 240 '^gpu\.(verify\.qwen-text-fullwidth\..*|verify\.qwen3vl-vision\..*|cuda_text)$'
      TAIL=20 step check-loader 180 "$bdir/bin/h3_tests" --gtest_filter='CudaLoader.*'
      TAIL=6 step media-ldd 30 bash -c "ldd $h3 | grep -E 'not found|libav|libsw|x264|microhttpd'; ! ldd $h3 | grep -q 'not found'"
      TAIL=16 step media-generate 120 "$h3" --device cuda generate --prompt "a red fox in fresh snow" --width 256 \
        --height 256 --steps 2 --seed 5 --json "$out/media-generate.json" -o "$out/mini.mp4"
      TAIL=3 step media-mp4 30 python3 -c "import sys; b=open('$out/mini.mp4','rb').read(); print(len(b), 'bytes', b[4:8]); sys.exit(b[4:8] != b'ftyp')"
      rm -f "$out/mini.mp4" ;;
    golden-checks)  # the checks on golden files (carried as .golden): registered by a configure that finds them
      [ -d "$golden" ] || echo "NOTE: no golden folder ($golden): these checks are not registered" |
        tee -a "$out/summary.txt"
      cmake "$bdir" > "$out/reconfigure.log" 2>&1
      TAIL=24 ctest_step check-golden 240 '^gpu\.(verify\.pipeline_t2va\.(bf16|f32)|verify\.qwen-text\.f32)$' ;;
    smoke)
      FRAMES=22 STEPS=2 gen smoke-full-480-bf16 240 832 480 bf16 ;;
    gen768-fp8)
      gen gen768-fp8 290 1344 768 fp8 ;;
    gen768-bf16)
      gen gen768-bf16 400 1344 768 bf16 ;;
    gen480-fp8)
      # An FP8 checkpoint on the device's local disk, then a run that loads the DiT from it (the page cache dropped
      # first when this user may: otherwise the load reads memory, and the log says so).
      mkdir -p "$ckpt_dir"
      TAIL=4 step convert-fp8 200 "$h3" --device cuda --log-level info convert procedural:full --quant fp8 \
        --dtype bf16 -o "$ckpt_dir/dit-fp8.safetensors"
      sync
      if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then echo "page cache dropped"; else
        echo "cannot drop the page cache (not root): the checkpoint load below reads memory, not the disk"; fi |
        tee -a "$out/summary.txt"
      # The disk's own cold read rate of that file (dd, 64 MiB blocks), the yardstick for the load's GB/s.
      if [ -s "$ckpt_dir/dit-fp8.safetensors" ] && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then
        TAIL=3 step disk-read 120 dd if="$ckpt_dir/dit-fp8.safetensors" of=/dev/null bs=64M
        echo 3 > /proc/sys/vm/drop_caches
      fi
      if [ -s "$ckpt_dir/dit-fp8.safetensors" ]; then
        gen gen480-fp8 180 832 480 fp8 --dit "$ckpt_dir/dit-fp8.safetensors"
      else
        gen gen480-fp8 150 832 480 fp8
      fi
      rm -rf "$ckpt_dir" ;;
    gen480-bf16)
      gen gen480-bf16 180 832 480 bf16 ;;
    serve)
      TAIL=20 step serve-fp8 300 python3 scripts/device/serve_two_jobs.py "$h3" "$out/serve-fp8.json" --frames 124 \
        --steps 3 --model-dir procedural:full --precision fp8 --memory-plan auto ;;
    bench)  # the full DiT per forward (median of 3) at 480p and 768p, bf16 and FP8: docs/performance.md's table
      TAIL=40 step bench 300 "$h3" --device cuda bench --res 480p 768p --precision bf16 fp8 --reps 3 \
        --json "$out/bench.json" ;;
    gpu-ctest)
      TAIL=60 step gpu-ctest "${GPU_CTEST_LIMIT:-300}" ctest --test-dir "$bdir" -L gpu --timeout 240 \
        --output-on-failure ;;
    *) echo "unknown step $s" | tee -a "$out/summary.txt" ;;
  esac
done
python3 scripts/device/pipeline_matrix_summary.py "$out" > "$out/matrix.txt" 2>&1
cat "$out/matrix.txt"
