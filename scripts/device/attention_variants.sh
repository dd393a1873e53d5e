#!/usr/bin/env bash
# Issue 40: the f16-score FP8 attention kernel's variants (src/backend/cuda/attention/wgmma_fp8.cu, the switches
# above its `Three` configuration) against the default, each a build of bench/attention_wgmma_check (nvcc alone, all
# at once: ~40 s on 16 cores). For each: correctness on odd and full shapes (uniform data, then rising), then ROUNDS
# timing rounds taking turns (--reps 10 at the DiT's 14,908 / 37,830 x 56, e4m3 O as the forward runs it). Prints one
# line per run and a last table of the mean TFLOPS; the check outputs go to $OUT/attention-variants/.
#   head    the library's kernel (three warpgroups, 128-key tiles, every exponential on the MUFU)
#   poly4   one exponential pair in 4 from a degree-2 polynomial on the FMA pipe (wgmma_softmax_f16.cuh: hex2_poly)
#   poly2   one pair in 2
#   ring3   a 3-deep K / V ring
#   pipe    two warpgroups, S_{j+1} issued before tile j's softmax into a second S buffer, 3-deep ring
# Usage, from the checkout's root on the device machine: scripts/device/attention_variants.sh [VARIANT...]
# (default: all; ROUNDS=3).
set -uo pipefail
out=${OUT:-/tmp/h3-out}/attention-variants
mkdir -p "$out"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
w=src/backend/cuda/attention
declare -A flags=([head]="" [poly4]="-DH3_FP8_POLY_EVERY=4" [poly2]="-DH3_FP8_POLY_EVERY=2"
                  [ring3]="-DH3_FP8_THREE_STAGES=3" [pipe]="-DH3_FP8_F16_PIPE")
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(head poly4 poly2 ring3 pipe)
for v in "${variants[@]}"; do
  [ -n "${flags[$v]+x}" ] || { echo "unknown variant $v (head poly4 poly2 ring3 pipe)" >&2; exit 2; }
  # shellcheck disable=SC2086  # the flags are words
  "$nvcc" -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -Isrc ${flags[$v]} bench/attention_wgmma_check.cu \
    "$w/wgmma_bf16.cu" "$w/wgmma_fp8.cu" -o "/tmp/attention_check_$v" > "$out/nvcc-$v.log" 2>&1 &
done
wait
failed=0
for v in "${variants[@]}"; do
  [ -x "/tmp/attention_check_$v" ] || { echo "== $v: build failed"; cat "$out/nvcc-$v.log"; failed=1; continue; }
  "/tmp/attention_check_$v" --reps 2 --kinds fp8-f16,fp8-f16-O8 > "$out/ok-$v.txt" 2>&1
  a=$?
  "/tmp/attention_check_$v" --data rising --reps 1 --kinds fp8-f16-O8 --shapes 1000:1000:3,4100:129:2,14908:14908:56 \
    > "$out/rising-$v.txt" 2>&1
  b=$?
  echo "== $v correct: uniform rc $a, rising rc $b; rel-L2 at 14908 x 56: $(awk '$2 == 14908 {printf "%s %s ", $1, $7}' \
    "$out/ok-$v.txt")"
  [ $a = 0 ] && [ $b = 0 ] || failed=1
done
for r in $(seq 1 "${ROUNDS:-3}"); do
  for v in "${variants[@]}"; do
    [ -x "/tmp/attention_check_$v" ] || continue
    "/tmp/attention_check_$v" --reps 10 --kinds fp8-f16-O8 --shapes 14908:14908:56,37830:37830:56 > "$out/t$r-$v.txt" 2>&1
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
exit $failed
