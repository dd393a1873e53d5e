#!/usr/bin/env python3
"""h3 --device cuda serve with FP8 and its models resident (procedural mini models, one rank): two jobs; the first
reports the group's loads, the second none (its time to MP4 excludes any load), both with their peak GPU memory per
phase. Skipped (77), loudly, without an NVIDIA GPU.
usage: test_serve_gpu.py H3_BINARY"""
import shutil
import subprocess
import sys

from serve_common import SKIP, Server, check, log, main_wrapper

REQ = {"prompt": "a red kite over the dunes", "width": 128, "height": 64, "frames": 124, "steps": 4}


def run(h3):
    if shutil.which("nvidia-smi") is None or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode:
        log("SKIPPED LOUDLY: no NVIDIA GPU on this machine (the GPU serve test runs on the device machine)")
        sys.exit(SKIP)
    s = Server(h3, global_args=["--device", "cuda"],
               args=["--runner", "generator", "--precision", "fp8", "--memory-plan", "auto"]).start(timeout=600)
    try:
        results = []
        for n in range(2):
            st, j = s.json("POST", "/v1/videos", dict(REQ, seed=5 + n))
            check(st == 202, "job %d accepted: %s" % (n + 1, j.get("id", j)))
            done = s.wait_job(j["id"], timeout=600)
            check(done["status"] == "completed", "job %d completed: %s" % (n + 1, done.get("error")))
            results.append(done.get("result", {}))
            log("  job %d result: %s" % (n + 1, results[-1]))
        # A job may ask for the DiT in bf16: the resident FP8 DiT is rebuilt for it (a load) when the plan allows.
        st, j = s.json("POST", "/v1/videos", dict(REQ, seed=9, precision="bf16"))
        check(st == 202, "bf16 job accepted: %s" % j.get("id", j))
        done = s.wait_job(j["id"], timeout=600)
        check(done["status"] == "completed", "bf16 job completed: %s" % done.get("error"))
        third = done.get("result", {})
        check(third.get("precision") == "bf16" and "dit" in [l["model"] for l in third.get("loads", [])],
              "the bf16 job rebuilt the DiT: %s" % third.get("loads"))
        first, second = results
        check("load" in first.get("timings", {}) and first.get("loads"),
              "the first job reports the group's loads: %s" % first.get("loads"))
        check("load" not in second.get("timings", {}) and second.get("loads") == [],
              "the second job loads nothing (models resident): %s" % second.get("timings"))
        for r in results:
            t = r.get("timings", {})
            check(all(p in t for p in ("encode", "denoise", "decode_video", "decode_audio", "mux")),
                  "timings by phase: %s" % sorted(t))
            ttm = sum(v for k, v in t.items() if k not in ("load", "lora_merge"))
            check(abs(r.get("time_to_mp4_s", -1) - ttm) < 1e-6, "time_to_mp4_s = the phases without loads")
            peaks = r.get("peak_memory_bytes", {})
            check(all(peaks.get(p, 0) > 0 for p in ("encode", "denoise", "decode_video", "decode_audio")),
                  "peak GPU memory per phase: %s" % peaks)
    except Exception:
        s.dump_log()
        raise
    finally:
        s.cleanup()


if __name__ == "__main__":
    main_wrapper(run)
