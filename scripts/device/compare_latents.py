#!/usr/bin/env python3
"""Two runs' final latents (h3 generate --latents: video_latents, audio_latent_rows) compared: rel-L2 of each
tensor, ||b - a|| / ||a||, against a bound (a distributed mode that is not bitwise, e.g. tensor, against 1 rank).
Exit 1 when a tensor differs in shape or exceeds the bound, or a value is not finite.
usage: compare_latents.py REFERENCE.safetensors OTHER.safetensors [--max-rel-l2 X]"""
import argparse
import sys

import numpy as np
from safetensors.numpy import load_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reference")
    ap.add_argument("other")
    ap.add_argument("--max-rel-l2", type=float, default=5e-2)
    a = ap.parse_args()
    ref, oth = load_file(a.reference), load_file(a.other)
    bad = 0
    for key in ("video_latents", "audio_latent_rows"):
        x, y = ref[key].astype(np.float64), oth[key].astype(np.float64)
        if x.shape != y.shape or not np.isfinite(y).all():
            print("%s: shapes %s / %s or non-finite values" % (key, x.shape, y.shape))
            bad += 1
            continue
        rel = float(np.linalg.norm(y - x) / max(np.linalg.norm(x), 1e-30))
        ok = rel <= a.max_rel_l2
        bad += not ok
        print("%s %s rel-l2 %.3e (bound %.1e) %s" % (key, list(x.shape), rel, a.max_rel_l2, "ok" if ok else "OVER"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
