#!/usr/bin/env python3
"""h3 serve switching LoRAs between jobs on 2 ranks (procedural mini models, --lora-dir): job A with LoRA X, job B
without, job C with X again: C's latents are bitwise A's and equal `h3 generate --lora X`, B's equal `h3 generate`
without a LoRA (re-merged from the pristine weights, no accumulated deltas); a job with the same set as the one
before is not re-merged. Client paths, folder escapes and unknown names are refused with 400. A rank that loads
another LoRA (H3_DEBUG_LORA) fails the job naming that rank.
usage: test_serve_lora.py H3_BINARY [extra serve args, e.g. --mode ulysses-ag]"""
import json
import os
import struct
import sys
import tempfile

from serve_common import Server, check, h3_generate, log, main_wrapper, running, safetensors_tensors

REQ = {"prompt": "a kite over the dunes", "width": 64, "height": 64, "frames": 124, "steps": 3, "seed": 91}
HIDDEN, INNER, FFN, RANK = 96, 448, 160, 4  # the procedural mini DiT (model/dit/config.cpp "mini")


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, (shape, values) in tensors.items():
        b = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return path


def lora(path, seed):
    """A LoRA in the reference layout (no prefix, lora_A / lora_B) on two blocks' qkv and fc1."""
    def vals(n, k):
        return [((i * 7919 + k * 104729 + seed * 31) % 2001 - 1000) / 20000.0 for i in range(n)]
    t = {}
    for b in (0, 2):
        for m, out in (("attn.qkv_proj", 3 * INNER), ("mlp.fc1", 2 * FFN)):
            t["blocks.%d.%s.lora_A.weight" % (b, m)] = ([RANK, HIDDEN], vals(RANK * HIDDEN, b * 10 + 1))
            t["blocks.%d.%s.lora_B.weight" % (b, m)] = ([out, RANK], vals(out * RANK, b * 10 + 2))
    return write_safetensors(path, t)


def generate(h3, work, name, extra):
    latents = h3_generate(h3, work, name, REQ, extra)
    if latents is None:
        raise AssertionError("h3 generate %s failed" % name)
    return safetensors_tensors(latents)


def run(h3):
    extra = sys.argv[2:]  # e.g. --mode ulysses-ag: the rank slices are re-made from the re-merged weights
    work = tempfile.mkdtemp(prefix="h3serve-lora-")
    loras = os.path.join(work, "loras")
    os.makedirs(loras)
    x = lora(os.path.join(loras, "x.safetensors"), 1)
    y = lora(os.path.join(work, "y.safetensors"), 2)  # outside the folder: only the fault hook loads it
    plain = generate(h3, work, "plain", [])
    with_x = generate(h3, work, "with-x", ["--lora", x + ":0.8"])
    check(plain != with_x, "the LoRA changes the latents")
    with running(Server(h3, ranks=2, args=["--runner", "generator", "--write-latents", "--lora-dir", loras] + extra)
                 .start(timeout=600)) as s:
        st, m = s.json("GET", "/v1/models")
        check(st == 200 and m["data"][0]["loras"] == ["x.safetensors"], "GET /v1/models lists the LoRA folder: %s" %
              m["data"][0].get("loras"))
        for loras_field, expect in (([{"path": x}], "never opens files named by the client"),
                                    ([{"name": "../y.safetensors"}], "plain file name"),
                                    ([{"name": "missing.safetensors"}], "no LoRA 'missing.safetensors'"),
                                    ([{"name": "x.safetensors", "strength": "high"}], "must be a number"),
                                    ({"name": "x.safetensors"}, "must be a list")):
            st, j = s.json("POST", "/v1/videos", dict(REQ, loras=loras_field))
            msg = (j.get("error") or {}).get("message", "")
            check(st == 400 and expect in msg, "refused (%d): %s" % (st, msg[:160]))
        sets = [("A", [{"name": "x.safetensors", "strength": 0.8}]), ("B", None),
                ("C", [{"name": "x.safetensors", "strength": 0.8}]), ("D", [{"name": "x.safetensors", "strength": 0.8}])]
        ids = {}
        for name, l in sets:
            body = dict(REQ) if l is None else dict(REQ, loras=l)
            st, j = s.json("POST", "/v1/videos", body)
            check(st == 202, "job %s accepted: %s" % (name, j.get("id", j)))
            ids[name] = j["id"]
        got = {}
        for name, _ in sets:
            done = s.wait_job(ids[name], timeout=600)
            check(done["status"] == "completed", "job %s completed: %s" % (name, done.get("error")))
            got[name] = (safetensors_tensors(os.path.join(s.store, "outputs", ids[name] + ".latents.safetensors")),
                         done.get("result", {}))
        check(got["A"][0] == with_x, "job A (LoRA X) = h3 generate --lora X, bitwise")
        check(got["B"][0] == plain, "job B (no LoRA) = h3 generate without a LoRA: the delta was removed, bitwise")
        check(got["C"][0] == got["A"][0], "job C (X again) = job A, bitwise")
        check(got["D"][0] == got["A"][0], "job D (X again) = job A, bitwise")
        remerged = {n: got[n][1].get("lora_remerged") for n in got}
        check(remerged == {"A": True, "B": True, "C": True, "D": False},
              "re-merged exactly when the set changed: %s" % remerged)
        check(got["A"][1].get("lora_digest") == got["C"][1].get("lora_digest") and "lora_digest" not in got["B"][1],
              "the agreed digest is reported: %s" % got["A"][1].get("lora_digest"))

    log("a rank that loads another LoRA fails the job, named")
    with running(Server(h3, ranks=2, args=["--runner", "generator", "--lora-dir", loras],
                        env={"H3_DEBUG_LORA": "1:" + y}).start(timeout=600), work) as s:
        st, j = s.json("POST", "/v1/videos", dict(REQ, loras=[{"name": "x.safetensors"}]))
        check(st == 202, "job accepted")
        done = s.wait_job(j["id"], timeout=600)
        err = (done.get("error") or {}).get("message", "")
        check(done["status"] == "failed" and "ranks disagree" in err and "rank 1" in err,
              "failed naming rank 1: %s" % err[:300])


if __name__ == "__main__":
    main_wrapper(run)
