#!/usr/bin/env python3
"""The matrix of scripts/device/pipeline_matrix.sh as a table: per run the time to MP4 (loads excluded) against issue
24's target, the time of each phase, the loads (seconds, GB/s from a file) and the peak GPU memory of each phase
(768p bf16: <= 100 GB in every phase); then the serve run's two jobs. Exit 1 when a run is missing or misses a target.
usage: pipeline_matrix_summary.py OUT_DIR"""
import json
import os
import sys

TARGETS = {"gen768-fp8": 175, "gen768-bf16": 272, "gen480-fp8": 45, "gen480-bf16": 72}
PEAK_LIMIT_GB = {"gen768-bf16": 100}
PHASES = ("encode", "denoise", "decode_video", "decode_audio", "mux")


def main(out):
    bad = 0
    seen = 0
    print("%-12s %8s %7s %5s  %s" % ("run", "to MP4 s", "target", "ok", "phases (s) | loads | peak GB by phase"))
    for name, target in TARGETS.items():
        path = os.path.join(out, name + ".json")
        if not os.path.exists(path):
            continue
        seen += 1
        r = json.load(open(path))
        t = r["timings"]
        ttm = r["time_to_mp4_s"]
        ok = ttm <= target
        peaks = r.get("peak_memory_bytes", {})
        limit = PEAK_LIMIT_GB.get(name)
        if limit is not None and any(v / 1e9 > limit for v in peaks.values()):
            ok = False
        bad += not ok
        loads = ", ".join("%s %.1f s%s" % (l["model"], l["seconds"], " %.2f GB/s" % l["gb_per_s"] if l["file_bytes"] else "")
                          for l in r.get("loads", []))
        print("%-12s %8.2f %7d %5s  %s | load %.1f s: %s | %s" % (
            name, ttm, target, "yes" if ok else "NO", " ".join("%s %.2f" % (p, t.get(p, -1)) for p in PHASES),
            t.get("load", 0), loads, " ".join("%s %.1f" % (k, v / 1e9) for k, v in peaks.items())))
        plan = r.get("memory_plan", {})
        if plan:
            print("%-12s plan %s, estimated peak %.1f GB of %.1f GB" % (
                "", plan.get("policy"), plan.get("peak_bytes", 0) / 1e9, plan.get("device_bytes", 0) / 1e9))
    serve = os.path.join(out, "serve-fp8.json")
    if os.path.exists(serve):
        seen += 1
        s = json.load(open(serve))
        for i, j in enumerate(s.get("jobs", [])):
            res = j.get("result") or {}
            print("serve job %d: %s, to MP4 %.2f s, timings %s, loads %s" % (
                i + 1, j["status"], res.get("time_to_mp4_s", -1), json.dumps(res.get("timings")),
                [l["model"] for l in res.get("loads", [])]))
        jobs = s.get("jobs", [])
        second_ok = len(jobs) == 2 and jobs[1]["status"] == "completed" and "load" not in (jobs[1].get("result") or {}).get("timings", {"load": 1})
        print("serve: second job without load: %s" % ("yes" if second_ok else "NO"))
        bad += not second_ok
    if seen == 0:
        print("no records in %s" % out)
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
