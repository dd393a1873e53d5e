#!/bin/sh
# `h3 --device cuda --deterministic generate` (procedural mini models: the text tower, the DiT and the VAE decoders on
# the GPU) on 1, 2 and 3 ranks sharing the GPU, in bf16 and in FP8: the final latents files must be byte-identical
# across rank counts. Prints the record of each run (--json). Exit 77 (skipped, loudly) without an NVIDIA GPU.
# usage: generate_ranks.sh H3_BINARY WORK_DIR
set -u
h3=$1
work=$2
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIPPED LOUDLY: no NVIDIA GPU on this machine (GPU tests run on the device machine): generate on 1-3 ranks"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work" || exit 1
status=0
for p in bf16 fp8; do
  for n in 1 2 3; do
    out="$work/$p-n$n.mp4"
    if ! env -u H3_RANKS "$h3" --log-level warn --device cuda --deterministic --ranks "$n" generate \
        --prompt 'a kite over the sea' --width 128 --height 64 --steps 3 --seed 11 --precision "$p" --latents \
        --json "$work/$p-n$n.json" -o "$out" > "$work/$p-n$n.log" 2>&1; then
      echo "FAIL: $p on $n rank(s):"; tail -n 20 "$work/$p-n$n.log"; status=1; continue
    fi
    grep -E "^(timings|peak|load )" "$work/$p-n$n.log"
    if [ "$n" -gt 1 ]; then
      if cmp -s "$work/$p-n1.latents.safetensors" "$work/$p-n$n.latents.safetensors"; then
        echo "ok: $p latents on $n ranks == 1 rank (byte for byte)"
      else
        echo "FAIL: $p latents on $n ranks differ from 1 rank"; status=1
      fi
    fi
  done
done
[ $status -eq 0 ] && echo "PASS" || echo "FAIL"
exit $status
