#!/usr/bin/env python3
"""`h3 --device cuda serve` with the given runner flags (e.g. FP8, models resident) and two jobs, one after the other:
writes both jobs' results (timings, time to MP4, loads, peak memory) and the server's /v1/models to OUT_JSON, and
prints them. The second job of a resident server must show no load (--kept MODEL...: no load of those models, e.g.
`--kept dit` for a server under a budget that keeps the DiT's blocks it can and loads the text tower per job).
usage: serve_two_jobs.py H3 OUT_JSON [--width W --height H --frames F --steps N] [--kept MODEL...] SERVE_FLAGS..."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "serve"))
from serve_common import Server, log  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("h3")
    ap.add_argument("out_json")
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--frames", type=int, default=124)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--prompt", default="a red kite over a windy beach at dusk, waves breaking, gulls calling")
    ap.add_argument("--kept", nargs="+", default=None, help="models the second job must not load (default: none at all)")
    a, serve_flags = ap.parse_known_args()
    s = Server(a.h3, global_args=["--device", "cuda"], args=["--runner", "generator"] + serve_flags, timeout=120)
    s.start(timeout=400)
    record = {"serve_flags": serve_flags, "jobs": []}
    try:
        st, models = s.json("GET", "/v1/models")
        record["models"] = models
        for n in range(2):
            body = {"prompt": a.prompt, "width": a.width, "height": a.height, "frames": a.frames, "steps": a.steps,
                    "seed": 1 + n}
            st, j = s.json("POST", "/v1/videos", body)
            if st != 202:
                raise RuntimeError("job %d refused: %s %s" % (n + 1, st, j))
            done = s.wait_job(j["id"], timeout=400)
            record["jobs"].append({"status": done["status"], "result": done.get("result"), "error": done.get("error")})
            log("job %d: %s %s" % (n + 1, done["status"], json.dumps(done.get("result") or done.get("error"))))
    except Exception:
        s.dump_log()
        raise
    finally:
        with open(a.out_json, "w") as f:
            json.dump(record, f, indent=2)
        s.cleanup()
    jobs = record["jobs"]
    ok = len(jobs) == 2 and all(j["status"] == "completed" for j in jobs)
    second = (jobs[1].get("result") or {}) if len(jobs) == 2 else {}
    if a.kept:
        loaded = [entry.get("model") for entry in second.get("loads", [])]
        no_load = bool(second) and not any(m in loaded for m in a.kept)
        log("second job loads %s; none of %s: %s" % (loaded, a.kept, no_load))
    else:
        no_load = "load" not in second.get("timings", {"load": 1})
    log("second job without load: %s; its time to MP4 %.2f s" % (no_load, second.get("time_to_mp4_s", -1)))
    sys.exit(0 if ok and no_load else 1)


if __name__ == "__main__":
    main()
