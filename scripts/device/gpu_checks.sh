#!/usr/bin/env bash
# One device call's worth of GPU checks and measurements (the `device` tool's H200 machine), each step logged to
# $OUT/<step>.log and bounded by its own time limit so that a slow step cannot take the others with it.
# Usage, from the checkout's root there:
#   H3_DEBS=.debs H3_DEBS_EXTRA=.debs-extra scripts/device/gpu_checks.sh STEP...
# Steps: probe build smi power tests gpu-ctest wgmma-attn gemm verify parity parity-quick bench480 bench768 benchall
#        bench-bf16 bench-fp8 anchor decode decode-profile vae loader media weights
# (H3_DEBS comes from scripts/device/fetch_debs.sh: FFmpeg included, the build requires it.)
set -uo pipefail
source scripts/device/common.sh
g=.golden
h3=build-gpu/bin/h3
step() { TAIL=${TAIL:-6} run_step "$@"; }  # step NAME LIMIT_S COMMAND...
for s in "$@"; do
  case $s in
    probe)
      step probe 60 bash -c 'nvidia-smi; ls /usr/include | grep -E "spdlog|fmt|nlohmann|CLI|gtest" ; nproc' ;;
    build)
      TAIL=15 step build 420 env H3_BENCH=ON H3_TARGETS="h3 h3_tests attention_wgmma_check gemm_check power_phase" \
        scripts/device/build.sh build-gpu ;;
    smi)  # clocks, power and throttle reasons every 250 ms while the later steps run
      nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
        --format=csv -lms 250 > "$out/smi.csv" 2>&1 &
      echo "== smi sampling in the background" ;;
    gemm)
      TAIL=12 step gemm 180 build-gpu/bin/gemm_check --reps 5
      TAIL=6 step gemm-no-fast-accum 120 env H3_FP8_FAST_ACCUM=0 build-gpu/bin/gemm_check --reps 5 --rows 14908 ;;
    power)  # one block's ops alone and in the forward's order: each op's time and the SM clock around it
      for a in "14908 fp8" "37830 fp8" "14908 bf16" "37830 bf16"; do
        set -- $a
        TAIL=12 step "power-$1-$2" 120 build-gpu/bin/power_phase --rows "$1" --precision "$2" --iters 30
      done ;;
    tests)
      TAIL=25 step tests 240 build-gpu/bin/h3_tests --gtest_filter='Cuda*:VideoVaeGolden*:AudioVae*' ;;
    wgmma-attn)  # our attention kernels (bf16, FP8 with bf16 O, FP8 with e4m3 O): checks and TFLOPS
      TAIL=34 step wgmma-attn 200 build-gpu/bin/attention_wgmma_check --reps 5 ;;
    verify)
      for p in bf16 fp8; do
        for f in dit-mini dit-fullwidth-1block; do
          TAIL=4 step "verify-$f-$p" 120 "$h3" --device cuda verify "$g/$f.safetensors" --precision "$p"
        done
      done ;;
    quantlora)
      TAIL=12 step quantlora-ctest 300 ctest --test-dir build-gpu -L gpu \
        -R 'dit-mini\.(fp8|scaled_fp8|int8|int8-convrot|nvfp4|mxfp8)\.bf16|dit-mini\.lora' --output-on-failure ;;
    gpu-ctest)  # every ctest entry labelled gpu (verify, deterministic parity bf16/fp8 on 2..4 ranks, quant, LoRA,
                # NCCL, text tower, VAE), three at a time
      TAIL=40 step gpu-ctest 480 ctest --test-dir build-gpu -L gpu -j 3 --output-on-failure ;;
    parity-quick)
      for a in "ulysses bf16 2" "ulysses bf16 3" "ulysses-ag bf16 2" "ulysses fp8 2" "ulysses-ag fp8 3"; do
        set -- $a
        TAIL=3 step "parity-$1-$2-n$3" 120 "$h3" --device cuda --deterministic parity "$g/dit-fullwidth-1block.safetensors" \
          --mode "$1" --ranks "$3" --precision "$2"
      done ;;
    vae)
      TAIL=12 step vae-tests 240 build-gpu/bin/h3_tests --gtest_filter='CudaVae*:CudaBackendOps*'
      for p in f32 bf16; do TAIL=8 step "vae-verify-$p" 120 "$h3" --device cuda verify "$g/video-vae-mini.safetensors" --precision "$p"; done
      TAIL=4 step vae-parity-bf16-n3 120 "$h3" --device cuda vae-parity "$g/video-vae-mini.safetensors" --precision bf16 --ranks 3 ;;
    parity)
      for p in bf16 fp8; do
        for m in ulysses ulysses-ag; do
          for n in 2 3; do
            TAIL=3 step "parity-$m-$p-n$n" 120 "$h3" --device cuda --deterministic parity "$g/dit-fullwidth-1block.safetensors" \
              --mode "$m" --ranks "$n" --precision "$p"
          done
        done
      done ;;
    bench480)
      TAIL=12 step bench480 300 "$h3" --device cuda bench --res 480p --precision bf16 fp8 --reps 3 --profile \
        --json "$out/bench480.json" ;;
    bench768)
      TAIL=12 step bench768 400 "$h3" --device cuda bench --res 768p --precision bf16 fp8 --reps 3 --profile \
        --no-isolated --json "$out/bench768.json" ;;
    bench-bf16)
      TAIL=20 step bench-bf16 400 "$h3" --device cuda bench --res 480p 768p --precision bf16 --reps 3 --profile \
        --json "$out/bench-bf16.json" ;;
    bench-fp8)  # FP8 only, both resolutions; TAG names the JSON (for A/B runs under different variables)
      TAIL=12 step "bench-fp8${TAG:-}" 300 "$h3" --device cuda bench --res 480p 768p --precision fp8 --reps 3 --profile \
        --json "$out/bench-fp8${TAG:-}.json" ;;
    benchall)
      TAIL=20 step benchall 560 "$h3" --device cuda bench --res 480p 768p --precision bf16 fp8 --reps 3 --profile \
        --json "$out/bench.json" ;;
    anchor)  # the diffusers-style PyTorch forward (scripts/device/torch_anchor.py), for same-run ratios
      TAIL=8 step anchor 300 python3 scripts/device/torch_anchor.py --res 480p 768p --backend default cudnn \
        --json "$out/anchor.json" ;;
    decode)
      TAIL=20 step decode 300 "$h3" --device cuda bench-decode --res 768p 480p --precision bf16 --split 2 4 8 \
        --json "$out/decode.json" ;;
    decode-profile)  # 768p bf16, one more whole decode with the decoder's profile regions
      TAIL=40 step decode-profile 200 "$h3" --device cuda bench-decode --res 768p --precision bf16 --split 1 \
        --no-audio --profile --json "$out/decode-profile.json" ;;
    loader)  # the staged loader, the DiT/VAEs read straight to the GPU, h3 convert on the GPU, full-size procedural VAEs
      TAIL=30 step loader 300 build-gpu/bin/h3_tests --gtest_filter='CudaLoader.*' ;;
    media)  # FFmpeg's libraries from the carried .debs resolve, and the whole job writes an MP4 on the GPU machine
      TAIL=12 step media-ldd 30 bash -c "ldd $h3 | grep -E 'not found|libav|libsw|x264'; ! ldd $h3 | grep -q 'not found'"
      TAIL=8 step media-generate 300 "$h3" --device cuda generate --prompt "a red fox in fresh snow" --width 256 \
        --height 256 --steps 2 --seed 5 -o "$out/mini.mp4"
      TAIL=3 step media-mp4 30 python3 -c "import sys; b=open('$out/mini.mp4','rb').read(); print(len(b), 'bytes', b[4:8]); sys.exit(b[4:8] != b'ftyp')" ;;
    weights)  # procedural:full DiT converted to FP8 on the GPU into the local disk, then loaded from it (GB/s)
      f=/tmp/h3-dit-full-fp8.safetensors
      df -h /tmp > "$out/weights-disk.log" 2>&1
      TAIL=4 step convert-full-fp8 400 "$h3" --log-level info convert procedural:full --quant fp8 --dtype bf16 -o "$f"
      sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || echo "(page cache not dropped: not root)"
      TAIL=8 step load-full-fp8 300 "$h3" --device cuda bench --model "$f" --res 480p --precision fp8 --reps 1 \
        --no-isolated --json "$out/load-full-fp8.json"
      TAIL=8 step load-full-fp8-cached 300 "$h3" --device cuda bench --model "$f" --res 480p --precision fp8 --reps 1 \
        --no-isolated --json "$out/load-full-fp8-cached.json"
      rm -f "$f" ;;
    *) echo "unknown step $s" ;;
  esac
done
# The device tool brings back at most 8 files: the logs travel as one (each under its step's header).
for f in "$out"/*.log; do
  [ -e "$f" ] || continue
  { echo "######## $(basename "$f" .log)"; cat "$f"; } >> "$out/all-logs.txt"
  rm -f "$f"
done
cat "$out/summary.txt"
