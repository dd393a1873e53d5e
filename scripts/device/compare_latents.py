#!/usr/bin/env python3
"""Two runs' final latents (h3 generate --latents: video_latents, audio_latent_rows) compared: rel-L2 of each
tensor, ||b - a|| / ||a||, against a bound (a distributed mode that is not bitwise, e.g. tensor, against 1 rank).
With --versus V --max-ratio R the bound is relative instead: OTHER's rel-L2 from REFERENCE at most R times V's
(FP8 in tensor mode, each rank quantizing its slices with their own scales, against a bf16 reference: no further
from it than the 1-rank FP8 run, up to R).
Exit 1 when a tensor differs in shape or exceeds the bound, or a value is not finite.
usage: compare_latents.py REFERENCE.safetensors OTHER.safetensors [--max-rel-l2 X | --versus V.safetensors
       --max-ratio R]"""
import argparse
import sys

import numpy as np
from safetensors.numpy import load_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reference")
    ap.add_argument("other")
    ap.add_argument("--max-rel-l2", type=float, default=5e-2)
    ap.add_argument("--versus", help="a third run: OTHER's distance to REFERENCE is bounded by this one's")
    ap.add_argument("--max-ratio", type=float, default=1.25)
    a = ap.parse_args()
    ref, oth = load_file(a.reference), load_file(a.other)
    vs = load_file(a.versus) if a.versus else None
    bad = 0
    for key in ("video_latents", "audio_latent_rows"):
        x, y = ref[key].astype(np.float64), oth[key].astype(np.float64)
        if x.shape != y.shape or not np.isfinite(y).all():
            print("%s: shapes %s / %s or non-finite values" % (key, x.shape, y.shape))
            bad += 1
            continue
        rel = rel_l2(x, y)
        if vs is None:
            ok = rel <= a.max_rel_l2
            print("%s %s rel-l2 %.3e (bound %.1e) %s" % (key, list(x.shape), rel, a.max_rel_l2, "ok" if ok else "OVER"))
        else:
            v = vs[key].astype(np.float64)
            base = rel_l2(x, v)
            ok = rel <= a.max_ratio * base
            print("%s %s rel-l2 %.3e, the versus run's %.3e: %.3fx (bound %.2fx) %s; the two runs apart: %.3e" % (
                key, list(x.shape), rel, base, rel / max(base, 1e-30), a.max_ratio, "ok" if ok else "OVER",
                rel_l2(v, y)))
        bad += not ok
    return 1 if bad else 0


def rel_l2(x, y):
    return float(np.linalg.norm(y - x) / max(np.linalg.norm(x), 1e-30))


if __name__ == "__main__":
    sys.exit(main())
