#!/usr/bin/env python3
"""The results of scripts/device/budget_matrix.sh (issue 37): per capped run its time to MP4 against the resident run
of the same shape (ratio and the issue's bound), whether the latent hashes equal the resident run's, h3's device
memory per phase read from the device (the holder's samples: max used in the phase's window minus what was used
before h3 started) against the budget, the allocator's own peak, and the peak host RSS per phase; then the benches
and the anchor's lines. Writes OUT_DIR/summary.json (every record found, the verdicts) and removes the records and
holder files it folded in (the device tool brings back 8 files). Exit 1 when a step failed or a bound is missed.
usage: budget_matrix_summary.py OUT_DIR"""
import json
import os
import re
import sys

from matrix_steps import read_steps

GIB = 1 << 30
# name: (resident run, budget GiB, bound on the time ratio or None: "runs, ratio reported")
CAPPED = {
    "gen480-fp8-24": ("gen480-fp8", 24, 1.15),
    "gen480-fp8-12": ("gen480-fp8", 12, None),
    "gen768-fp8-24": ("gen768-fp8", 24, 1.05),
    "gen768-fp8-16": ("gen768-fp8", 16, 1.10),
    "gen768-bf16-24": ("gen768-bf16", 24, 1.10),
    # host memory short (issue 37 item 4): the DiT from an FP8 file, its streamed blocks from page-locked copies, then
    # read from the file at each copy (--host-memory 16G); ratios reported, hashes must be the resident run's
    "mapped-pinned": ("mapped-ref", 24, None),
    "mapped-24": ("mapped-ref", 24, None),
}
RESIDENT = ("gen480-fp8", "gen480-bf16", "gen768-fp8", "gen768-bf16", "tensor2-ref", "mapped-ref", "tail-768")
# Issue 40's time-to-MP4 targets (seconds, loads excluded), reported beside the resident runs, not a failure here.
TARGETS = {"gen768-fp8": 155.0, "gen768-bf16": 255.0, "gen480-fp8": 40.0, "gen480-bf16": 67.0}
BENCHES = ("bench-all", "bench-sustained")
OTHER = ("tensor2",)
PHASES = ("encode", "denoise", "decode_video", "decode_audio", "mux")


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def device_peaks(run, hold):
    """h3's device use per phase from the holder's samples: max(used) in the phase's window - baseline."""
    if not hold or "windows" not in hold or "phase_windows" not in run:
        return {}
    base = hold.get("baseline_used_bytes", 0)
    out = {}
    for phase, (t0, t1) in run["phase_windows"].items():
        used = [w[2] for w in hold["windows"] if w[1] >= t0 and w[0] <= t1]
        if used:
            out[phase] = max(used) - base
    return out


def main(out):
    summary = load_json(os.path.join(out, "summary.json")) or {}
    summary.setdefault("runs", {})
    summary.setdefault("holds", {})
    summary["steps"] = read_steps(out)
    summary["verdicts"] = {}
    bad = 0
    for st in summary["steps"]:
        ok = st["rc"] in (0, 77)
        print("step %-28s rc=%-3d %7.1f s%s" % (st["step"], st["rc"], st["seconds"], "" if ok else "  FAILED"))
        bad += not ok
    for name in list(CAPPED) + list(RESIDENT) + list(OTHER):
        rec = load_json(os.path.join(out, name + ".json"))
        if rec is not None:
            summary["runs"][name] = rec
            os.remove(os.path.join(out, name + ".json"))
        hold = load_json(os.path.join(out, name + ".hold.json"))
        if hold is not None:
            summary["holds"][name] = hold
            os.remove(os.path.join(out, name + ".hold.json"))
    summary.setdefault("benches", {})
    for name in BENCHES:
        rec = load_json(os.path.join(out, name + ".json"))
        if rec is not None:
            summary["benches"][name] = rec
            os.remove(os.path.join(out, name + ".json"))
    runs, holds = summary["runs"], summary["holds"]
    print("%-15s %9s %9s %6s %5s %6s  %s" % ("run", "to MP4 s", "resident", "ratio", "bound", "hashes",
                                            "device GiB by phase (read from the device / allocator) | host RSS GiB"))
    for name in RESIDENT:
        if name in runs:
            r = runs[name]
            target = TARGETS.get(name)
            print("%-15s %9.2f %9s %6s %5s %6s  alloc %s | host %s%s" % (
                name, r["time_to_mp4_s"], "-", "-", "-", "-",
                " ".join("%s %.1f" % (k, v / GIB) for k, v in r.get("peak_memory_bytes", {}).items()),
                " ".join("%s %.1f" % (k, v / GIB) for k, v in r.get("host_rss_peak_bytes", {}).items()),
                "" if target is None else " | issue 40 target %.0f s: %s" % (
                    target, "met" if r["time_to_mp4_s"] <= target else "missed by %.1f s" % (r["time_to_mp4_s"] - target))))
    for name, (ref, gib, bound) in CAPPED.items():
        if name not in runs:
            continue
        r = runs[name]
        base = runs.get(ref)
        ratio = r["time_to_mp4_s"] / base["time_to_mp4_s"] if base else float("nan")
        same = base is not None and r.get("latents_fnv1a") == base.get("latents_fnv1a")
        dev = device_peaks(r, holds.get(name))
        under = all(v <= gib * GIB for v in dev.values()) and bool(dev)
        ok = same and under and (bound is None or ratio <= bound)
        bad += not ok
        summary["verdicts"][name] = {"ratio": ratio, "bound": bound, "hashes_equal": same, "budget_gib": gib,
                                     "device_peaks_bytes": dev, "under_budget": under, "ok": ok}
        print("%-15s %9.2f %9.2f %6.3f %5s %6s  device %s | alloc %s | host %s%s" % (
            name, r["time_to_mp4_s"], base["time_to_mp4_s"] if base else float("nan"), ratio,
            "%.2f" % bound if bound else "-", "same" if same else "DIFFER",
            " ".join("%s %.2f" % (k, v / GIB) for k, v in dev.items()) or "(no samples)",
            " ".join("%s %.1f" % (k, v / GIB) for k, v in r.get("peak_memory_bytes", {}).items()),
            " ".join("%s %.1f" % (k, v / GIB) for k, v in r.get("host_rss_peak_bytes", {}).items()),
            "" if ok else "  <-- MISSED"))
        plan = r.get("memory_plan", {})
        for line in plan.get("describe", []):
            print("      plan: %s" % line)
    for name in OTHER:
        if name in runs:
            r = runs[name]
            print("%-15s %9.2f  (2 ranks, tensor mode, one GPU) device %s" % (
                name, r["time_to_mp4_s"],
                " ".join("%s %.2f" % (k, v / GIB) for k, v in device_peaks(r, holds.get(name)).items())))
    logs = os.path.join(out, "all-logs.txt")
    if os.path.exists(logs):
        text = open(logs, errors="replace").read()
        for line in text.splitlines():
            if re.search(r"s/forward=|^(480p|768p) +(bf16|fp8) |rel-l2|group offloading set up|DiT weight streaming:|profile (denoise|decode_video):|mp4: the writer", line):
                print("  " + line.strip()[:200])
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
