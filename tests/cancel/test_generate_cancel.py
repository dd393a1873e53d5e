#!/usr/bin/env python3
"""One Ctrl-C stops `h3 generate` in the phase it lands in (procedural mini models, CPU):
  - during the prompt encoding (a long prompt, so the text tower's 50 layers take seconds): SIGINT stops it within
    a layer, exit 130, nothing written;
  - during the denoising: stops within a step;
  - on 2 ranks (the tower tensor-parallel over both) and on 3 ranks with a dedicated encoder rank (rank 0 has no
    layers of its own): SIGINT to rank 0 alone, as `h3 serve`'s cancel reaches only rank 0, stops every rank inside
    the encoding.
Each case prints how long the stop took. The per-phase stop points (decode, write) are checked exactly by the gtest
Generator.CancelReachesEveryPhase.
usage: test_generate_cancel.py H3_BINARY"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

PROMPT_BYTES = 12000  # ~12k byte tokens: the mini tower's 50 layers take seconds on 2 cores, not milliseconds


def log(*a):
    print(*a, flush=True)


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def rank_pid(launcher_pid, rank, timeout=30):
    """The pid of MPI rank `rank` under the mpirun that `launcher_pid` became (h3 --ranks N execs mpirun)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        todo, seen = [launcher_pid], set()
        while todo:
            p = todo.pop()
            if p in seen:
                continue
            seen.add(p)
            try:
                with open("/proc/%d/environ" % p, "rb") as f:
                    env = f.read().split(b"\0")
                if b"OMPI_COMM_WORLD_RANK=%d" % rank in env:
                    return p
            except OSError:
                pass
            todo.extend(children(p))
        time.sleep(0.1)
    raise AssertionError("rank %d of the mpirun started as pid %d not found" % (rank, launcher_pid))


class Run:
    """h3 generate in the background; stderr lines collected as they come."""

    def __init__(self, h3, args, out):
        self.lines = []
        self.cv = threading.Condition()
        self.p = subprocess.Popen([h3, "--log-level", "warn"] + args + ["-o", out], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, env=dict(os.environ, H3_TIMEOUT="60"))
        self.t = threading.Thread(target=self._read)
        self.t.start()

    def _read(self):
        for raw in self.p.stdout:
            with self.cv:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                self.cv.notify_all()
        with self.cv:
            self.cv.notify_all()

    def wait_line(self, pattern, timeout=300):
        deadline = time.time() + timeout
        with self.cv:
            while time.time() < deadline:
                if any(re.search(pattern, l) for l in self.lines):
                    return
                if self.p.poll() is not None and not self.t.is_alive():
                    break
                self.cv.wait(0.2)
        raise AssertionError("no line matching %r (exit %s):\n%s" % (pattern, self.p.poll(), "\n".join(self.lines)))

    def finish(self, timeout):
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            rc = None
        self.t.join()
        return rc, "\n".join(self.lines)


def check(cond, msg, text=""):
    if not cond:
        raise AssertionError(msg + ("\n---- output ----\n" + text if text else ""))
    log("  ok:", msg)


def case(h3, work, name, args, trigger, expect, signal_rank=None, wait_after=0.3, bound_s=30):
    log("%s: SIGINT after %r" % (name, trigger))
    out_dir = tempfile.mkdtemp(dir=work)
    out = os.path.join(out_dir, "out.mp4")
    r = Run(h3, args, out)
    r.wait_line(trigger)
    time.sleep(wait_after)
    target = r.p.pid if signal_rank is None else rank_pid(r.p.pid, signal_rank)
    t0 = time.time()
    os.kill(target, signal.SIGINT)
    rc, text = r.finish(bound_s + 60)
    took = time.time() - t0
    m = re.search(r"cancelled: (.*?); nothing was written", text)
    log("  stopped %.2f s after the signal (exit %s): %s" % (took, rc, m.group(1) if m else "no cancel message"))
    check(rc is not None, "%s: the run ended (no hang)" % name, text)
    check(rc != 0 if signal_rank is not None else rc == 130, "%s: exit %s (130 on one rank)" % (name, rc), text)
    check(m is not None and expect in m.group(1), "%s: cancelled %s" % (name, expect), text)
    check(took < bound_s, "%s: stopped within %d s (%.2f s)" % (name, bound_s, took), text)
    check(os.listdir(out_dir) == [], "%s: nothing written (%s)" % (name, os.listdir(out_dir)), text)
    check(text.count("cancelled:") == 1, "%s: one cancel message (rank 0's)" % name, text)
    return m.group(1)


def run(h3):
    work = tempfile.mkdtemp(prefix="h3-cancel-")
    try:
        prompt = os.path.join(work, "prompt.txt")
        with open(prompt, "w") as f:
            words = "a lighthouse keeper walks the cliff path at dusk while gulls circle the lamp "
            f.write((words * (PROMPT_BYTES // len(words) + 1))[:PROMPT_BYTES])
        small = ["--width", "128", "--height", "64", "--seed", "5"]
        long_prompt = ["generate", "--prompt-file", prompt, "--steps", "2"] + small
        encode = "while encoding the prompt (before text layer"
        where = case(h3, work, "1 rank, encoding", long_prompt, r"^progress: encode 0/1", encode)
        layer = int(re.search(r"text layer (\d+) of 50", where).group(1))
        check(layer < 50, "1 rank: the encoding stopped at layer %d of 50, not after it" % layer)
        case(h3, work, "1 rank, denoising", ["generate", "--prompt", "a kite", "--steps", "40"] + small,
             r"^progress: denoise 2/", "during denoising", wait_after=0)
        case(h3, work, "2 ranks (tower on both), encoding", ["--ranks", "2"] + long_prompt, r"^progress: encode 0/1",
             encode, signal_rank=0)
        case(h3, work, "3 ranks, encoder rank 2, encoding", ["--ranks", "3"] + long_prompt + ["--encoder-ranks", "1"],
             r"^progress: encode 0/1", encode, signal_rank=0)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        run(sys.argv[1])
    except AssertionError as e:
        log("FAIL:", e)
        sys.exit(1)
    log("PASS")
