#!/usr/bin/env python3
"""h3 serve with keyframes and references (base64 uploads, docs/api.md): an fl2va and a ref2va job on the
procedural mini models give the same final latents as `h3 generate` with the same files; client paths, bad
base64, files of the wrong kind and oversize bodies are refused with 400/413 and leave no upload behind.
usage: test_serve_media.py H3_BINARY"""
import base64
import os
import struct
import sys
import tempfile
import time
import wave
import zlib

from serve_common import Server, check, h3_generate, main_wrapper, running, safetensors_tensors

REQ = {"prompt": "a lighthouse in the fog", "width": 64, "height": 64, "frames": 124, "steps": 2}


def png(path, w, h, phase):
    rows = b"".join(b"\x00" + bytes(v for x in range(w) for v in ((x * 255) // w, (y * 255) // h, phase))
                    for y in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
    return path


def wav(path, seconds):
    n = int(32000 * seconds)
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(32000)
        w.writeframes(b"".join(struct.pack("<h", int(8000 * ((i * 7) % 100 - 50) / 50)) for i in range(n)))
    return path


def b64(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def generate(h3, work, name, seed, media_args):
    latents = h3_generate(h3, work, name, dict(REQ, seed=seed), media_args)
    if latents is None:
        raise AssertionError("h3 generate %s failed" % name)
    return latents


def uploads(store):
    d = os.path.join(store, "uploads")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def run(h3):
    work = tempfile.mkdtemp(prefix="h3serve-media-")
    first = png(os.path.join(work, "first.png"), 64, 64, 40)
    last = png(os.path.join(work, "last.png"), 96, 64, 200)
    audio = wav(os.path.join(work, "ref.wav"), 0.75)
    ref_fl = generate(h3, work, "fl2va", 71, ["--first", first, "--last", last])
    ref_rf = generate(h3, work, "ref2va", 72, ["--ref-audio", audio, "--ref-image", last])
    with running(Server(h3, ranks=1, args=["--runner", "generator", "--write-latents", "--max-body", "4000000"])
                 .start(timeout=600), work) as s:
        # Refusals first: nothing may be left in uploads/ by them.
        bad = [
            (dict(REQ, first_image={"path": first}), "never reads files named by the client"),
            (dict(REQ, first_image={"data": "@@@not base64@@@"}), "not valid base64"),
            (dict(REQ, first_image={"data": base64.b64encode(b"plain text, no picture").decode(),
                                    "filename": "x.png"}), "first keyframe"),
            (dict(REQ, references=[{"kind": "audio", "data": b64(first), "filename": "a.png"}]), "holds no sound"),
            (dict(REQ, references=[{"kind": "image", "data": b64(first)}], first_image={"data": b64(first)}),
             "cannot be combined"),
            (dict(REQ, references=[{"data": b64(first)}]), "kind"),
        ]
        for body, expect in bad:
            st, j = s.json("POST", "/v1/videos", body)
            msg = (j.get("error") or {}).get("message", "")
            check(st == 400 and expect in msg, "refused (%d): %s" % (st, msg[:160]))
        big = dict(REQ, first_image={"data": "A" * 4100000})
        st, j = s.json("POST", "/v1/videos", big)
        check(st == 413, "a body over --max-body: %d" % st)
        check(uploads(s.store) == [], "refused requests leave no upload behind: %s" % uploads(s.store))

        st, j1 = s.json("POST", "/v1/videos", dict(REQ, seed=71, first_image={"data": b64(first), "filename": "f.png"},
                                                   last_image={"data": b64(last), "filename": "l.png"}))
        check(st == 202, "fl2va job accepted: %s" % j1)
        st, j2 = s.json("POST", "/v1/videos", dict(REQ, seed=72, references=[
            {"kind": "audio", "data": b64(audio), "filename": "r.wav"},
            {"kind": "image", "data": b64(last), "filename": "r.png"}]))
        check(st == 202, "ref2va job accepted: %s" % j2)
        check(len(uploads(s.store)) == 2, "two upload folders stored: %s" % uploads(s.store))
        for j, ref in ((j1, ref_fl), (j2, ref_rf)):
            done = s.wait_job(j["id"], timeout=600)
            check(done["status"] == "completed", "job %s completed: %s" % (j["id"], done.get("error")))
            got = os.path.join(s.store, "outputs", j["id"] + ".latents.safetensors")
            check(os.path.exists(got), "latents kept")
            check(safetensors_tensors(got) == safetensors_tensors(ref),
                  "job %s latents bitwise equal to h3 generate with the same files" % j["id"])
        st, _ = s.json("DELETE", "/v1/videos/" + j1["id"])
        check(st == 200 and len(uploads(s.store)) == 1, "deleting a job removes its uploads: %s" % uploads(s.store))


if __name__ == "__main__":
    main_wrapper(run)
