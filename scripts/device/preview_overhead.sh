#!/usr/bin/env bash
# Issue 39's GPU measurement on one H200 (the `device` tool's machine): what previews cost at 768p FP8, 124 frames,
# 50 steps (procedural:full, every component at the released shapes), and that they change nothing.
#   gtest      the GPU VAE's preview against its own full decode of the same latents, bitwise, bf16 and f32
#              (CudaPreview.*; needs h3_tests built)                                                          ~30
#   plain      one job without previews, its record in $OUT/plain.json                                 ~200-230
#   previews   the same job with --preview-dir and --preview-every ${EVERY:-10}: $OUT/previews.json, the
#              PNGs in $OUT/previews/                                                                   ~200-230
#   compare    time to MP4 (loads excluded) with / without: the target is <= 1.02x; the previews' count and
#              seconds; the final latents' hashes equal (the video bitwise the same)                        ~1
# Both jobs run with --memory-plan auto: a preview decodes with the video VAE, which must stay loaded while
# denoising (with `phases` the VAE loads for the decode only and the run makes no previews, saying so). Run the two
# jobs back to back on one warm machine (two device calls if one cannot hold both: each step is bounded alone).
# Usage, from the checkout's root there, after scripts/device/build.sh: scripts/device/preview_overhead.sh STEP...
set -uo pipefail
source scripts/device/common.sh
bdir=${H3_BUILD_DIR:-build-gpu}
h3=${H3_BIN:-$bdir/bin/h3}
prompt='a red kite over a windy beach at dusk, waves breaking, gulls calling'
gen() {  # gen NAME [more generate flags]
  local name=$1
  shift
  TAIL=12 run_step "$name" 420 "$h3" --device cuda generate --model procedural:full --prompt "$prompt" --width 1344 \
    --height 768 --frames 124 --steps 50 --seed 1 --precision fp8 --memory-plan auto --json "$out/$name.json" \
    -o "$out/$name.mp4" "$@"
  rm -f "$out/$name.mp4"
}
for s in "$@"; do
  case $s in
    gtest) TAIL=20 run_step gtest 300 "$bdir/bin/h3_tests" --gtest_filter='CudaPreview.*:Preview.*' ;;
    plain) gen plain ;;
    previews) gen previews --preview-dir "$out/previews" --preview-every "${EVERY:-10}" ;;
    compare)
      python3 - "$out" <<'EOF' | tee -a "$out/summary.txt"
import json, os, sys
out = sys.argv[1]
a, b = (json.load(open(os.path.join(out, n + ".json"))) for n in ("plain", "previews"))
ratio = b["time_to_mp4_s"] / a["time_to_mp4_s"]
p = b.get("previews", {})
print("time to MP4: %.2f s without previews, %.2f s with (%s): %.4fx (target <= 1.02x): %s" % (
    a["time_to_mp4_s"], b["time_to_mp4_s"], "%d previews in %.2f s" % (p.get("count", 0), p.get("seconds", 0)),
    ratio, "PASS" if ratio <= 1.02 else "FAIL"))
same = a["latents_fnv1a"] == b["latents_fnv1a"]
print("final latents %s (%s)" % ("bitwise equal" if same else "DIFFERENT", a["latents_fnv1a"]))
print("pictures:", sorted(os.listdir(os.path.join(out, "previews"))) if os.path.isdir(os.path.join(out, "previews"))
      else "none")
EOF
      ;;
    *) echo "unknown step $s (gtest plain previews compare)"; exit 2 ;;
  esac
done
