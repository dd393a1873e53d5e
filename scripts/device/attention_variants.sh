#!/usr/bin/env bash
# Issue 40: variants of the f16-score FP8 attention kernel (src/backend/cuda/attention/wgmma_fp8.cu, the switches
# above its `Three` configuration) against the library's, each a build of bench/attention_wgmma_check (nvcc alone, all
# at once: ~40 s on 16 cores). For each: correctness on odd and full shapes (uniform data, then rising; a minute at
# most each, so that a kernel that hangs ends the step), then ROUNDS timing rounds taking turns (--reps 10 at the
# DiT's 14,908 / 37,830 x 56, e4m3 O as the forward runs it), then (NCU=0 skips) ncu on one launch at 14,908 x 56.
# Prints one line per run and a last table of the mean TFLOPS; the outputs go to $OUT/attention-variants/.
#   head      the library's kernel (three warpgroups and a producer warpgroup, 128-key tiles, each warpgroup's softmax
#             beside its own P V)
#   chain3    head with each warpgroup's P V, S and softmax one after the other ("chained")
#   chain160  chain3 over 160-key tiles
#   four64    four warpgroups, no producer warpgroup (the last warp to release a stage loads its next tile), 64-key
#             tiles, chained
#   four64o   four64 with the softmax beside the warpgroup's own P V
#   self128   head without the producer warpgroup (168 registers a thread)
#   self160   self128 over 160-key tiles (ptxas spills 48 bytes a thread); self192: 192 keys (224 bytes)
#   self160c  self160 chained (no spills); self192c: 192 keys (8 bytes)
#   self128nf, four64onf  self128 and four64o without the fence before a release's count
# Usage, from the checkout's root on the device machine: scripts/device/attention_variants.sh [VARIANT...]
# (default: head chain3 chain160 four64 self128 self192c; ROUNDS=3).
set -uo pipefail
out=${OUT:-/tmp/h3-out}/attention-variants
mkdir -p "$out"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
w=src/backend/cuda/attention
declare -A flags=([head]="" [chain3]="-DH3_FP8_CHAIN3" [chain160]="-DH3_FP8_CHAIN160" [four64]="-DH3_FP8_FOUR64"
                  [four64o]="-DH3_FP8_FOUR64_OVERLAP" [self128]="-DH3_FP8_SELF128" [self160]="-DH3_FP8_SELF160"
                  [self192]="-DH3_FP8_SELF192" [self160c]="-DH3_FP8_SELF160_CHAIN" [self192c]="-DH3_FP8_SELF192_CHAIN"
                  [self128nf]="-DH3_FP8_SELF128 -DH3_FP8_NO_RELEASE_FENCE"
                  [four64onf]="-DH3_FP8_FOUR64_OVERLAP -DH3_FP8_NO_RELEASE_FENCE")
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(head chain3 chain160 four64 self128 self192c)
for v in "${variants[@]}"; do
  [ -n "${flags[$v]+x}" ] || { echo "unknown variant $v (${!flags[*]})" >&2; exit 2; }
  # shellcheck disable=SC2086  # the flags are words
  "$nvcc" -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -Isrc ${flags[$v]} bench/attention_wgmma_check.cu \
    "$w/wgmma_bf16.cu" "$w/wgmma_fp8.cu" -o "/tmp/attention_check_$v" > "$out/nvcc-$v.log" 2>&1 &
done
wait
failed=0
for v in "${variants[@]}"; do
  [ -x "/tmp/attention_check_$v" ] || { echo "== $v: build failed"; cat "$out/nvcc-$v.log"; failed=1; continue; }
  timeout 60 "/tmp/attention_check_$v" --reps 2 --kinds fp8-f16,fp8-f16-O8 > "$out/ok-$v.txt" 2>&1
  a=$?
  timeout 60 "/tmp/attention_check_$v" --data rising --reps 1 --kinds fp8-f16-O8 --shapes 1000:1000:3,4100:129:2,14908:14908:56 \
    > "$out/rising-$v.txt" 2>&1
  b=$?
  echo "== $v correct: uniform rc $a, rising rc $b; rel-L2 at 14908 x 56: $(awk '$2 == 14908 {printf "%s %s ", $1, $7}' \
    "$out/ok-$v.txt")"
  [ $a = 0 ] && [ $b = 0 ] || failed=1
done
for r in $(seq 1 "${ROUNDS:-3}"); do
  for v in "${variants[@]}"; do
    [ -x "/tmp/attention_check_$v" ] || continue
    timeout 60 "/tmp/attention_check_$v" --reps 10 --kinds fp8-f16-O8 --shapes 14908:14908:56,37830:37830:56 > "$out/t$r-$v.txt" 2>&1
    echo "== round $r $v: $(awk '/^fp8/ {printf "%s x %s %s TFLOPS (%s)  ", $2, $4, $(NF-2), $NF}' "$out/t$r-$v.txt")"
  done
done
python3 - "$out" "${variants[@]}" << 'PY'
import collections, glob, json, os, sys
out, variants = sys.argv[1], sys.argv[2:]
t = collections.defaultdict(list)
for v in variants:
    for f in glob.glob(os.path.join(out, f"t*-{v}.txt")):
        for line in open(f):
            p = line.split()
            if len(p) > 13 and p[0] == "fp8-f16-O8" and p[-1] == "ok":
                t[(v, p[1])].append(float(p[-3]))
rows = {v: {s: round(sum(x) / len(x), 1) for (w, s), x in t.items() if w == v} for v in variants}
print("variant   14908 x 56   37830 x 56  (mean TFLOPS, e4m3 O)")
for v in variants:
    print(f"{v:8s} {rows[v].get('14908', 0):11.1f} {rows[v].get('37830', 0):12.1f}")
json.dump(rows, open(os.path.join(out, "summary.json"), "w"), indent=1)
PY
# Where each variant's cycles go (NCU=0 skips): one launch at 14,908 x 56, e4m3 O, the clock left to the board.
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2> /dev/null || true)
if [ "${NCU:-1}" = 1 ] && [ -n "$ncu" ]; then
  for v in "${variants[@]}"; do
    [ -x "/tmp/attention_check_$v" ] || continue
    timeout 180 "$ncu" --clock-control none --launch-skip 2 --launch-count 1 -k regex:attention_fp8 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
      "/tmp/attention_check_$v" --reps 1 --kinds fp8-f16-O8 --shapes 14908:14908:56 > "$out/ncu-$v.txt" 2>&1
    echo "== ncu $v: $(grep -E "^ +(Duration|SM Frequency|Issue Slots Busy|Executed Ipc Active|Active Warps Per Scheduler|Eligible Warps Per Scheduler|No Eligible|Warp Cycles Per Issued Instruction) " \
      "$out/ncu-$v.txt" | awk '{$1=$1};1' | tr '\n' ';')"
  done
fi
exit $failed
