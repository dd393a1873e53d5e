#!/usr/bin/env bash
# Issues 37 and 40 on one H200 (the `device` tool's machine). Issue 37: the whole job on a small card, made honestly -- a separate
# process (scripts/device/hold_gpu_memory.py) takes all but N GiB of the device and holds it while h3 runs -- beside
# the resident run, back to back in one device call: procedural:full, 124 frames, 50 steps, time to MP4 without
# loads. Every run writes its record (--json) and the holder's device-read memory samples; budget_matrix_summary.py
# folds them into $OUT/summary.json and prints the table: time ratio against the resident run, latent hashes equal,
# h3's device use per phase read from the device (max used in the phase's window - what was used before h3
# started), host RSS per phase.
# The resident run of each shape writes the GEMM choices (--gemm-algos) that the capped runs read: the same
# algorithms, so the same arithmetic gives the same bits (tuning times candidates once; near-equal ones can flip).
# Steps (each bounded by its own limit; seconds expected on the H200):
#   build             unpack the carried .debs (H3_DEBS, default .debs), build h3, h3_tests, bench/mp4_tail and
#                     bench/attention_wgmma_check for sm_90a                                             ~90-150
#   checks            gtests, then bench-smoke                                                           ~40
#   gtests            the streamer's, the budget's and the mapped source's GPU tests                     ~30
#   attention         issue 40: the attention gtests (CudaOps.*: FP8 with f16 scores where the shape pays, 8d6e282)
#                     and bench/attention_wgmma_check on every kind (the build step builds it)            ~60
#                     (carry .golden holding ../shared/golden/qwen3vl-text-mini.safetensors, or the text tower's
#                     streaming tests report themselves skipped: ../shared does not travel)
#   bench-smoke       a budgeted 8-block bench (10 GiB card): the allocator's smoke and the first joules  ~30
#   gen480-fp8        480p FP8: resident, then 24 GiB and 12 GiB                                          ~180
#   gen768-fp8        768p FP8: resident, then 24 GiB                                                      ~390
#   gen768-fp8-ref    768p FP8 resident only                                                               ~195
#   gen768-fp8-16     768p FP8 at 16 GiB (needs gen768-fp8's GEMM file from the same machine)              ~200
#   gen768-bf16       768p bf16 resident                                                                   ~280
#   gen768-bf16-24    768p bf16 at 24 GiB (needs gen768-bf16's record and GEMM file from the same machine)   ~340
#   tensor2           768p FP8, 2 steps: 1 rank resident, then 2 ranks in tensor mode sharing the GPU, 16 GiB
#                     each (the holder leaves 32 GiB), then 1 rank in bf16: the tensor run's latents no further
#                     from the bf16 run's than 1.25x the 1-rank FP8 run's (FP8 per tensor on a rank's slices is
#                     another quantization than the whole weight's: docs/numerics.md); before it, bench-comm times
#                     the MPI exchanges. The tensor run took 72 s on an H100 (one DiT call 35.6 s, 31.3 s of it
#                     exchanges; 267 s before 1ba798b), 480 s allowed; --profile-regions logs where            ~110
#   tail              issue 40: 768p FP8, 2 steps, --profile-regions 1 (the decode's regions, the writer's log line),
#                     then bench/mp4_tail with the GPU decode's 3.9 s on this host's cores                      ~60
#   bench-bf16        h3 bench bf16 480p/768p resident, then under 16 GiB (the blocks that do not fit streamed)  ~120
#   serve24           h3 serve FP8 under a 24 GiB card (auto): two short 768p jobs; the second loads no DiT      ~120
#   gen480-fp8-ref    480p FP8 resident only                                                               ~55
#   gen480-bf16       480p bf16 resident                                                                   ~85
#   bench-all         issue 40: h3 bench 480p/768p, bf16/FP8, median of 3 with the isolated regions         ~150
#   bench-sustained   issue 40: h3 bench 480p bf16, median of 40 back to back (against bench-all's 3)      ~65
#   tune-cost         issue 40: a 768p FP8 bench writing its GEMM file, then one reading it (the tuning's cost) ~40
#   tail-x264         issue 40: bench/mp4_tail under libx264's held-frame settings (MediaSpec's x264_*)      ~60
#   anchor-resident   ../shared/anchors/perf_diffusers.py (carried in .anchors): diffusers' DiT resident     ~120
#   gpu-ctest         every GPU ctest entry (ctest -L gpu)                                                  ~60
#   anchor            ../shared/anchors/perf_diffusers_offload.py (carried in .anchors): diffusers' group
#                     offloading, resident and streamed, 480p/768p bf16                                    ~180
#   mapped            issue 37 item 4, host memory short: h3 convert procedural:full to an FP8 DiT file on the
#                     local disk (kept in H3_MATRIX_DIR for later calls), then 768p FP8 from it, MAPPED_STEPS
#                     (default 10) steps (MAPPED_PINNED=0 skips the page-locked run), prompt embeddings precomputed (procedural:full's text tower is generated,
#                     it has no file to stream from, so both runs skip it): resident; under a 24 GiB hold with the
#                     streamed blocks in page-locked copies (host memory as found); and the same with
#                     --host-memory 16G, where 30 GiB of copies + 8 GiB do not fit and the blocks are read from the
#                     file at each copy through a staging ring. Same latent hashes; peak host RSS per phase. Run it
#                     in a call of its own after build (convert ~200, the three runs ~80-120 each)         ~450
# The records live in H3_MATRIX_DIR (default /tmp/h3-matrix), which outlasts a device call while the machine stays
# warm (a later call's capped runs find the resident records and GEMM choices of an earlier one); each call ends by
# copying the table, summary.json and this call's logs to $OUT (the device tool brings back at most 8 files).
# STOP_ON_FAIL=1 skips the steps after one that failed (a broken build or check spends no more device time);
# STOP_ON_FAIL=NAME only those after the step NAME failed (build: the runs go on past a failed test).
# Usage, from the checkout's root there: scripts/device/budget_matrix.sh STEP...
set -uo pipefail
back=${OUT:-/tmp/h3-out}
export OUT=${H3_MATRIX_DIR:-/tmp/h3-matrix}
source scripts/device/common.sh
mkdir -p "$back"
: > "$out/all-logs.txt"
: > "$out/summary.txt"
bring_back() { cp -f "$out/matrix.txt" "$out/summary.json" "$out/all-logs.txt" "$out/summary.txt" "$back/" 2> /dev/null; }
trap bring_back EXIT
bdir=${H3_BUILD_DIR:-build-gpu}
h3=${H3_BIN:-$bdir/bin/h3}
algos=$out/gemm-algos
mkdir -p "$algos"
prompt='a red kite over a windy beach at dusk, waves breaking, gulls calling'
step() {  # step NAME LIMIT_S COMMAND...: run_step (common.sh), the log folded into all-logs.txt, the table redone
  run_step "$@"
  local rc=$? name=$1
  [ $rc -eq 0 ] || failed="$failed $name"
  { echo "######## $name (rc $rc)"; cat "$out/$name.log"; } >> "$out/all-logs.txt"
  rm -f "$out/$name.log"
  python3 scripts/device/budget_matrix_summary.py "$out" > "$out/matrix.txt" 2>&1
  bring_back  # after every step: a call killed at its limit still brings back what was done
  return $rc
}
hold() {  # hold NAME GIB: the holder takes all but GIB GiB of the device; returns once it holds it
  rm -f "$out/$1.hold.ready"
  python3 scripts/device/hold_gpu_memory.py --leave "${2}G" --ready "$out/$1.hold.ready" --json "$out/$1.hold.json" \
    > "$out/$1.hold.log" 2>&1 &
  echo $! > "$out/$1.hold.pid"
  for _ in $(seq 1 120); do
    [ -e "$out/$1.hold.ready" ] && { cat "$out/$1.hold.ready"; return 0; }
    kill -0 "$(cat "$out/$1.hold.pid")" 2> /dev/null || break
    sleep 0.5
  done
  echo "holder for $1 did not get ready:"; cat "$out/$1.hold.log"
  failed="$failed hold-$1"
  return 1
}
release() {  # release NAME: the holder writes its samples and exits
  local pid
  pid=$(cat "$out/$1.hold.pid" 2> /dev/null) || return 0
  kill -TERM "$pid" 2> /dev/null
  for _ in $(seq 1 60); do kill -0 "$pid" 2> /dev/null || break; sleep 0.5; done
  cat "$out/$1.hold.log" >> "$out/all-logs.txt"
  rm -f "$out/$1.hold.pid" "$out/$1.hold.log" "$out/$1.hold.ready"
}
gen() {  # gen NAME LIMIT_S W H PRECISION GIB|resident [more flags]: one whole job, its record in $OUT/NAME.json
  local name=$1 limit=$2 w=$3 h=$4 p=$5 cap=$6
  shift 6
  if [ "$cap" != resident ]; then hold "$name" "$cap" || return 1; fi
  TAIL=18 step "$name" "$limit" "$h3" --device cuda --gemm-algos "$algos/$h-$p.json" generate --model procedural:full \
    --prompt "$prompt" --width "$w" --height "$h" --frames "${FRAMES:-124}" --steps "${STEPS:-50}" --seed 1 \
    --precision "$p" --json "$out/$name.json" -o "$out/$name.mp4" "$@"
  local rc=$?
  [ "$cap" != resident ] && release "$name"
  rm -f "$out/$name.mp4"
  return $rc
}
run_bench_smoke() {  # 8 blocks under a 10 GiB card: the budget's smoke, and h3 bench's joules read from the board
  hold bench-smoke 10 && TAIL=12 step bench-smoke 120 "$h3" --device cuda bench --blocks 8 --res 480p \
    --precision fp8 bf16 --reps 2 --no-isolated --json "$out/bench-smoke.json"
  release bench-smoke
}
failed=
for s in "$@"; do
  if [ -n "${STOP_ON_FAIL:-}" ] && [ -n "$failed" ] &&
    { [ "$STOP_ON_FAIL" = 1 ] || [[ " $failed " == *" $STOP_ON_FAIL "* ]]; }; then
    echo "== skipping $s: STOP_ON_FAIL and$failed failed" | tee -a "$out/summary.txt"
    continue
  fi
  case $s in
    build)
      TAIL=15 step build 480 env H3_DEBS="${H3_DEBS:-.debs}" H3_BENCH="${H3_BENCH:-ON}" \
        H3_TARGETS="${H3_TARGETS:-h3 h3_tests mp4_tail attention_wgmma_check}" scripts/device/build.sh "$bdir" ;;
    attention)
      TAIL=30 step attention-gtests 180 "$bdir/bin/h3_tests" --gtest_filter='CudaOps.*:Tensor.*'
      TAIL=45 step attention-check 240 "$bdir/bin/attention_wgmma_check" --reps 5 ;;
    checks | gtests)
      TAIL=20 step check-stream 180 "$bdir/bin/h3_tests" \
        --gtest_filter='*Stream*:*Budget*:CudaLoader.*:Residency*:CudaText.LayersReadFromTheFile*'
      [ "$s" = checks ] && run_bench_smoke ;;
    bench-smoke) run_bench_smoke ;;
    tail)  # issue 40: where the seconds after the last step go, by region, and the writer's tail on this host
      FRAMES=124 STEPS=2 gen tail-768 150 1344 768 fp8 resident --profile-regions 1
      TAIL=12 step mp4-tail 120 "$bdir/bin/mp4_tail" --gpu-seconds 3.9 --audio-seconds 0.12 --runs 2 ;;
    gen480-fp8)
      gen gen480-fp8 150 832 480 fp8 resident
      gen gen480-fp8-24 150 832 480 fp8 24
      gen gen480-fp8-12 180 832 480 fp8 12 ;;
    gen768-fp8)
      gen gen768-fp8 260 1344 768 fp8 resident
      gen gen768-fp8-24 280 1344 768 fp8 24 ;;
    gen768-fp8-ref)  # the resident run alone (the reference of gen768-fp8-16 in another call)
      gen gen768-fp8 260 1344 768 fp8 resident ;;
    gen768-fp8-16)
      gen gen768-fp8-16 290 1344 768 fp8 16 ;;
    gen768-bf16)  # the resident run alone: with the capped one it passes a device call's 600 s
      gen gen768-bf16 420 1344 768 bf16 resident ;;
    gen768-bf16-24)  # needs gen768-bf16's record and GEMM file from the same (warm) machine
      gen gen768-bf16-24 480 1344 768 bf16 24 ;;
    tensor2)
      # The MPI exchanges alone first (host memory, 2 ranks, the 768p shapes): what a tensor-mode block pays.
      TAIL=6 step tensor2-comm 90 "$h3" --ranks 2 bench-comm --seq 37830 --iters 3
      FRAMES=124 STEPS=2 gen tensor2-ref 120 1344 768 fp8 resident --latents
      hold tensor2 32 && TAIL=18 step tensor2 480 "$h3" --device cuda --profile-regions 1 --ranks 2 generate --max-device-memory 16G \
        --mode tensor --model procedural:full --prompt "$prompt" --width 1344 --height 768 --frames 124 --steps 2 \
        --seed 1 --precision fp8 --json "$out/tensor2.json" -o "$out/tensor2.mp4" --latents
      release tensor2
      FRAMES=124 STEPS=2 gen tensor2-bf16 120 1344 768 bf16 resident --latents
      TAIL=6 step tensor2-compare 60 python3 scripts/device/compare_latents.py "$out/tensor2-bf16.latents.safetensors" \
        "$out/tensor2.latents.safetensors" --versus "$out/tensor2-ref.latents.safetensors" --max-ratio 1.25
      rm -f "$out"/tensor2*.mp4 "$out"/tensor2*.latents.safetensors ;;
    bench-bf16)
      TAIL=12 step bench-bf16 200 "$h3" --device cuda bench --res 480p 768p --precision bf16 --reps 2 --no-isolated \
        --json "$out/bench-bf16.json"
      hold bench-bf16-16 16 && TAIL=12 step bench-bf16-16 260 "$h3" --device cuda bench --res 480p 768p \
        --precision bf16 --reps 2 --no-isolated --json "$out/bench-bf16-16.json"
      release bench-bf16-16 ;;
    serve24)  # h3 serve under a 24 GiB card (memory plan auto): two short 768p FP8 jobs, the second loads no DiT
      hold serve24 24 && TAIL=20 step serve24 300 python3 scripts/device/serve_two_jobs.py "$h3" "$out/serve24.json" \
        --width 1344 --height 768 --frames 124 --steps 3 --kept dit --model-dir procedural:full --precision fp8 \
        --memory-plan auto
      release serve24 ;;
    mapped)
      ck=$out/ckpt
      mkdir -p "$ck"
      # The FP8 file is 47 GB: on the local disk when it has room, else nothing is converted (a full disk would
      # spend the convert's time and fail).
      avail=$(df --output=avail -B1G "$ck" | tail -n 1 | tr -d ' ')
      if [ ! -s "$ck/dit-fp8.safetensors" ] && [ "${avail:-0}" -lt 52 ]; then
        echo "== mapped: $avail GB free under $ck, the FP8 file needs 47: skipped" | tee -a "$out/summary.txt"
        failed="$failed mapped-disk"
        continue
      fi
      [ -s "$ck/dit-fp8.safetensors" ] || TAIL=4 step mapped-convert 260 "$h3" --device cuda --log-level info \
        convert procedural:full --quant fp8 --dtype bf16 -o "$ck/dit-fp8.safetensors"
      # 80 rows of the full DiT's text width, seeded: the same conditioning for the three runs.
      [ -s "$ck/embeds.safetensors" ] || python3 -c 'import sys, numpy as np; from safetensors.numpy import save_file
save_file({"prompt_embeds": (0.5 * np.random.default_rng(1).standard_normal((80, 5120))).astype(np.float32)}, sys.argv[1])' \
        "$ck/embeds.safetensors"
      from_file=(--dit "$ck/dit-fp8.safetensors" --embeddings "$ck/embeds.safetensors")
      STEPS=${MAPPED_STEPS:-10} gen mapped-ref 200 1344 768 fp8 resident "${from_file[@]}"
      [ "${MAPPED_PINNED:-1}" = 0 ] || STEPS=${MAPPED_STEPS:-10} gen mapped-pinned 240 1344 768 fp8 24 "${from_file[@]}"
      STEPS=${MAPPED_STEPS:-10} gen mapped-24 320 1344 768 fp8 24 "${from_file[@]}" --host-memory 16G ;;
    gen480-fp8-ref)  # the resident run alone
      gen gen480-fp8 150 832 480 fp8 resident ;;
    gen480-bf16)
      gen gen480-bf16 180 832 480 bf16 resident ;;
    bench-all)  # issue 40's h3 bench: 480p/768p, bf16/FP8, median of 3, isolated regions (attention TFLOPS), joules
      TAIL=48 step bench-all 330 "$h3" --device cuda bench --res 480p 768p --precision bf16 fp8 --reps 3 \
        --json "$out/bench-all.json" ;;
    bench-sustained)  # the 480p bf16 forward's median over 40 back to back (the generator's 49) against bench-all's 3
      TAIL=10 step bench-sustained 150 "$h3" --device cuda bench --res 480p --precision bf16 --reps 40 --no-isolated \
        --json "$out/bench-sustained.json" ;;
    tune-cost)  # what cuBLASLt's tuning adds to a first forward: one 768p FP8 bench writing its GEMM file, one reading it
      rm -f "$out/tune-cost-algos.json"
      TAIL=6 step tune-first 120 "$h3" --device cuda --gemm-algos "$out/tune-cost-algos.json" bench --res 768p \
        --precision fp8 --reps 1 --no-isolated
      TAIL=6 step tune-cached 120 "$h3" --device cuda --gemm-algos "$out/tune-cost-algos.json" bench --res 768p \
        --precision fp8 --reps 1 --no-isolated ;;
    tail-x264)  # the writer's tail on this host's cores under libx264's held-frame settings (MediaSpec's x264_*)
      for v in default "--sync-lookahead 0" "--threads 16 --sync-lookahead 0" "--lookahead 30 --sync-lookahead 0" \
        "--lookahead 20 --sync-lookahead 0"; do
        args=()
        [ "$v" = default ] || read -r -a args <<< "$v"
        TAIL=4 step "tail-x264-$(echo "$v" | tr -d " -")" 60 "$bdir/bin/mp4_tail" --gpu-seconds 3.9 --audio-seconds 0.12 --runs 2 \
          "${args[@]}"
      done ;;
    anchor-resident)  # ../shared/anchors/perf_diffusers.py (carried in .anchors): diffusers' DiT resident, same board
      rm -rf /tmp/diffusers && mkdir -p /tmp/diffusers && tar -C /tmp/diffusers -xJf .anchors/diffusers-src.tar.xz
      TAIL=10 step anchor-resident 300 env PYTHONPATH=/tmp/diffusers/src PYTHONUNBUFFERED=1 \
        python3 .anchors/perf_diffusers.py ;;
    gpu-ctest)
      TAIL=40 step gpu-ctest 300 ctest --test-dir "$bdir" -L gpu --timeout 240 --output-on-failure ;;
    anchor)
      rm -rf /tmp/diffusers && mkdir -p /tmp/diffusers && tar -C /tmp/diffusers -xJf .anchors/diffusers-src.tar.xz
      TAIL=14 step anchor-offload 420 env PYTHONPATH=/tmp/diffusers/src PYTHONUNBUFFERED=1 \
        python3 .anchors/perf_diffusers_offload.py ;;
    *) echo "unknown step $s" | tee -a "$out/summary.txt" ;;
  esac
done
python3 scripts/device/budget_matrix_summary.py "$out" > "$out/matrix.txt" 2>&1
cat "$out/matrix.txt"
bring_back
