#!/usr/bin/env python3
"""h3 serve with the real Generator (procedural mini models, CPU) on 2 ranks: five jobs - one cancelled
mid-denoise, one whose rank 1 is killed inside the DiT - and the others' MP4s valid and their final latents
bitwise equal to `h3 generate` with the same request.
usage: test_serve_generate.py H3_BINARY"""
import os
import struct
import sys
import tempfile
import threading

from serve_common import (Server, check, h3_generate, log, main_wrapper, running, safetensors_tensors, sse_events,
                          submit_jobs)

REQ = {"prompt": "a red kite over the dunes", "width": 64, "height": 64, "frames": 124, "steps": 4}


def mp4_boxes(data):
    boxes, off = [], 0
    while off + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[off:off + 8])
        if size == 1:
            size = struct.unpack(">Q", data[off + 8:off + 16])[0]
        if size < 8:
            break
        boxes.append(kind.decode("latin-1"))
        off += size
    return boxes, off == len(data)


def run(h3):
    work = tempfile.mkdtemp(prefix="h3serve-gen-")
    refs = {k: h3_generate(h3, work, "ref-%d" % (500 + k), dict(REQ, seed=500 + k), ranks=2, timeout=900)
            for k in (0, 3, 4)}
    if not all(refs.values()):
        log("SKIPPED LOUDLY: `h3 generate` itself fails in this build (the pipeline, issue #6), so there is no "
            "reference to compare the server with")
        sys.exit(77)
    with running(Server(h3, ranks=2, args=["--runner", "generator", "--write-latents", "--debug-faults",
                                           "--stall-timeout", "120"]).start(timeout=600), work) as s:
        bodies = [dict(REQ, seed=500 + i) for i in range(5)]
        bodies[1]["steps"] = 30  # long enough to cancel in the middle
        bodies[2]["x_debug_fault"] = "1:0:kill"  # rank 1 kills itself at DiT block 0
        ids = submit_jobs(s, bodies)
        seen = {}
        for ev, d in sse_events(s, "/v1/videos/%s/events" % ids[1], timeout=900):
            if ev == "video" and d.get("phase") == "denoise" and d.get("step", 0) >= 2 and "at" not in seen:
                seen["at"] = d["step"]
                seen["st"] = s.json("POST", "/v1/videos/%s/cancel" % ids[1])[0]
        j1 = s.wait_job(ids[1])
        check(j1["status"] == "cancelled" and "at" in seen and j1["step"] <= seen["at"] + 1,
              "job 1 cancelled within one step (asked at %s, stopped at %s of %s)" % (seen.get("at"), j1["step"],
                                                                                     j1["steps"]))
        j2 = s.wait_job(ids[2], timeout=900)
        err = (j2.get("error") or {}).get("message", "")
        check(j2["status"] == "failed" and "rank 1" in err, "job 2 failed naming rank 1: %s" % err[:300])
        for k in (0, 3, 4):
            j = s.wait_job(ids[k], timeout=900)
            check(j["status"] == "completed", "job %d completed" % k)
            latents = os.path.join(s.store, "outputs", ids[k] + ".latents.safetensors")
            check(os.path.exists(latents), "job %d latents kept" % k)
            if j.get("bytes"):
                st, h, p = s.request("GET", j["content_url"])
                boxes, whole = mp4_boxes(p)
                check(st == 200 and whole and boxes[0] == "ftyp" and "moov" in boxes and "mdat" in boxes,
                      "job %d MP4 is well formed (%s, %d bytes)" % (k, boxes, len(p)))
            else:
                raise AssertionError("job %d has no MP4 (result %s)" % (k, j.get("result")))
            a, b = safetensors_tensors(latents), safetensors_tensors(refs[k])
            check(a.keys() == b.keys() and all(a[n] == b[n] for n in a),
                  "job %d final latents bitwise equal to h3 generate's (%s)" %
                  (k, ", ".join("%s %s" % (n, a[n][1]) for n in sorted(a))))
        st, h = s.json("GET", "/health")
        check(st == 200 and h["restarts"] >= 1, "group recreated after the kill, server ready")


if __name__ == "__main__":
    main_wrapper(run)
