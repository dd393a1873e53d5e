#!/usr/bin/env python3
"""Makes a small card out of a large one, honestly: this separate process takes all but --leave of the device's
free memory and holds it until SIGTERM/SIGINT, while another process (h3) runs in what is left. Meanwhile it reads
the device's own figure of used memory (cudaMemGetInfo through torch, every --period seconds), so that the other
process's device use is known from the device, not from that process's allocator: used(t) - baseline, where the
baseline is the device's used memory right after the hold (this process's context and allocation, and whatever
else was there).

--ready FILE is written (one JSON line) once the memory is held; --json FILE gets, on exit: the held and left
bytes, the baseline, and windows [t0, t1, max used] of --window seconds (unix time) over the whole hold, for the
peak of each phase of the other run (its record's phase_windows).
usage: hold_gpu_memory.py --leave 24G [--ready FILE] [--json FILE] [--period 0.01] [--window 0.25]"""
import argparse
import json
import signal
import sys
import time

import torch

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text):
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1] if t and t[-1] in UNITS else ""
    return int(float(t[: len(t) - len(unit)]) * UNITS[unit])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--leave", required=True, help="device memory left free for the other process (24G, 16GiB)")
    ap.add_argument("--ready")
    ap.add_argument("--json")
    ap.add_argument("--period", type=float, default=0.01)
    ap.add_argument("--window", type=float, default=0.25)
    a = ap.parse_args()
    leave = parse_size(a.leave)
    torch.cuda.init()
    free, total = torch.cuda.mem_get_info()
    if free <= leave:
        print("hold: only %.2f GiB free, cannot leave %.2f GiB" % (free / 2**30, leave / 2**30), file=sys.stderr)
        return 1
    # Chunks of 1 GiB, then the remainder adjusted until free is `leave` to within 2 MiB (torch's allocator rounds
    # to 2 MiB pages; cudaMalloc of a fresh segment can take a little more for its page tables).
    held = []
    chunk = 1 << 30
    while True:
        free, _ = torch.cuda.mem_get_info()
        excess = free - leave
        if excess < (2 << 20):
            break
        n = min(chunk, excess - (excess % (2 << 20)) if excess > (2 << 20) else excess)
        held.append(torch.empty(int(n), dtype=torch.uint8, device="cuda"))
    torch.cuda.synchronize()
    free, _ = torch.cuda.mem_get_info()
    baseline = total - free
    held_bytes = sum(t.numel() for t in held)
    ready = {"total_bytes": total, "held_bytes": held_bytes, "free_bytes": free, "leave_bytes": leave,
             "baseline_used_bytes": baseline}
    print("hold: holding %.2f GiB, %.2f GiB free of %.2f GiB" % (held_bytes / 2**30, free / 2**30, total / 2**30),
          flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    if a.ready:
        with open(a.ready + ".tmp", "w") as f:
            f.write(json.dumps(ready) + "\n")
        import os
        os.replace(a.ready + ".tmp", a.ready)
    windows = []
    w0 = time.time()
    wmax = baseline
    peak = baseline
    while not stop:
        f, _ = torch.cuda.mem_get_info()
        used = total - f
        wmax = max(wmax, used)
        now = time.time()
        if now - w0 >= a.window:
            windows.append([round(w0, 3), round(now, 3), wmax])
            peak = max(peak, wmax)
            w0, wmax = now, total - f
        time.sleep(a.period)
    windows.append([round(w0, 3), round(time.time(), 3), wmax])
    peak = max(peak, wmax)
    ready.update({"peak_used_bytes": peak, "peak_other_bytes": peak - baseline, "windows": windows})
    print("hold: the other process's peak read from the device %.2f GiB (left %.2f GiB)" %
          ((peak - baseline) / 2**30, leave / 2**30), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(ready, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
