#!/usr/bin/env python3
"""The results of scripts/device/pipeline_matrix.sh: the steps (rc, seconds), then the matrix as a table: per run the
time to MP4 (loads excluded) against issue 24's target, the time of each phase, the loads (seconds, GB/s from a file)
and the peak GPU memory of each phase (768p bf16: <= 100 GB in every phase); then the serve run's two jobs. Writes
OUT_DIR/summary.json (the steps, every run record found, the verdicts) and removes the records it folded in (the
device tool brings back 8 files). Exit 1 when a step failed or a run misses its target.
usage: pipeline_matrix_summary.py OUT_DIR"""
import json
import os
import sys

from matrix_steps import read_steps

TARGETS = {"gen768-fp8": 175, "gen768-bf16": 272, "gen480-fp8": 45, "gen480-bf16": 72}
PEAK_LIMIT_GB = {"gen768-bf16": 100}
PHASES = ("encode", "denoise", "decode_video", "decode_audio", "mux")


def main(out):
    bad = 0
    seen = 0
    summary = {"steps": [], "runs": {}, "verdicts": {}}
    # Incremental: runs folded in by an earlier call (this device command's or the previous one's) stay.
    prev_path = os.path.join(out, "summary.json")
    if os.path.exists(prev_path):
        try:
            summary["runs"] = json.load(open(prev_path)).get("runs", {})
        except ValueError:
            pass
    summary["steps"] = read_steps(out)
    for st in summary["steps"]:
        print("step %-30s rc=%-3d %8.1f s%s" % (st["step"], st["rc"], st["seconds"],
                                              "" if st["rc"] in (0, 77) else "  FAILED"))
        bad += st["rc"] not in (0, 77)
    print("%-12s %8s %7s %5s  %s" % ("run", "to MP4 s", "target", "ok", "phases (s) | loads | peak GB by phase"))
    for name, target in TARGETS.items():
        path = os.path.join(out, name + ".json")
        if os.path.exists(path):
            summary["runs"][name] = json.load(open(path))
        if name not in summary["runs"]:
            continue
        seen += 1
        r = summary["runs"][name]
        t = r["timings"]
        ttm = r["time_to_mp4_s"]
        ok = ttm <= target
        peaks = r.get("peak_memory_bytes", {})
        limit = PEAK_LIMIT_GB.get(name)
        if limit is not None and any(v / 1e9 > limit for v in peaks.values()):
            ok = False
        bad += not ok
        summary["verdicts"][name] = {"time_to_mp4_s": ttm, "target_s": target, "ok": ok}
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
        summary["runs"]["serve-fp8"] = json.load(open(serve))
    if "serve-fp8" in summary["runs"]:
        seen += 1
        s = summary["runs"]["serve-fp8"]
        for i, j in enumerate(s.get("jobs", [])):
            res = j.get("result") or {}
            print("serve job %d: %s, to MP4 %.2f s, timings %s, loads %s" % (
                i + 1, j["status"], res.get("time_to_mp4_s", -1), json.dumps(res.get("timings")),
                [l["model"] for l in res.get("loads", [])]))
        jobs = s.get("jobs", [])
        second_ok = len(jobs) == 2 and jobs[1]["status"] == "completed" and "load" not in (jobs[1].get("result") or {}).get("timings", {"load": 1})
        print("serve: second job without load: %s" % ("yes" if second_ok else "NO"))
        summary["verdicts"]["serve-fp8"] = {"second_job_without_load": second_ok}
        bad += not second_ok
    # Records of other runs (the smoke run, the media check) travel inside summary.json too.
    for f in sorted(os.listdir(out)):
        name = f[:-5]
        if f.endswith(".json") and f != "summary.json":
            try:
                summary["runs"][name] = json.load(open(os.path.join(out, f)))
            except ValueError as e:
                summary["runs"][name] = {"unreadable": str(e)}
    summary["ok"] = bad == 0 and (seen > 0 or bool(summary["steps"]))
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    for name in summary["runs"]:
        p = os.path.join(out, name + ".json")
        if os.path.exists(p):
            os.remove(p)
    if seen == 0 and not summary["steps"]:
        print("no records in %s" % out)
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
