#!/usr/bin/env python3
"""h3 serve against hostile uploads and an unlucky store (fake runner, 1 rank):
  - a 2 KB WAV at 1 Hz, pictures declaring 16384^2 or 20000 px in a few bytes, a truncated PNG: 400 each, and the
    server's memory moves by at most a few MB (uploads are probed in a limited child process);
  - one server per store (a lock); a damaged database refuses to start saying what to do; a row whose JSON does
    not parse fails that job only; leftover .partial files are removed; job objects carry no server paths;
  - with --full-disk (a CTest entry of its own): the store's disk filling up mid-job (a small tmpfs) fails that
    job only, and the server stays up; exit 77 (SKIPPED LOUDLY) where no tmpfs can be mounted.
usage: test_serve_hostile.py H3_BINARY [--full-disk]"""
import base64
import json
import os
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
import zlib

from serve_common import SKIP, Server, check, log, main_wrapper

GOOD = {"prompt": "a lighthouse at dusk", "seconds": 5, "steps": 3}


def png(w, h, rows=None, cut=0):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    if rows is None:
        rows = b"".join(b"\0" + bytes((x * 7 + y) % 256 for x in range(3 * w)) for y in range(h))
    data = zlib.compress(rows, 9)
    if cut:
        data = data[:len(data) - cut]
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", data) + chunk(b"IEND", b""))


def wav(rate, seconds=None, nbytes=2000):
    pcm = bytes(nbytes)
    return (b"RIFF" + struct.pack("<I", 36 + len(pcm)) + b"WAVEfmt " +
            struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16) + b"data" + struct.pack("<I", len(pcm)) + pcm)


def status_kb(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rss_kb(pid):
    return status_kb(pid, "VmRSS")


def reset_peak(pid):
    """Resets the process's peak resident size (VmHWM) to its current size (Linux >= 4.0; "5" > clear_refs), so that
    VmHWM afterwards is the peak of what follows, not of the start-up. False when this kernel or user may not."""
    try:
        with open("/proc/%d/clear_refs" % pid, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def hostile_uploads(s):
    log("hostile uploads")
    cases = [
        ("a 2 KB WAV at 1 Hz", {"references": [{"kind": "audio", "filename": "a.wav", "data": wav(1)}]}, "Hz"),
        ("a 2 KB WAV at 1 GHz", {"references": [{"kind": "audio", "filename": "a.wav", "data": wav(10 ** 9)}]}, "Hz"),
        ("a PNG declaring 16384x16384 in a few bytes",
         {"first_image": {"filename": "k.png", "data": png(16384, 16384, rows=b"\0" * 64)}}, "pixels"),
        ("a PNG 20000 pixels wide", {"first_image": {"filename": "k.png", "data": png(20000, 2, rows=b"\0" * 64)}},
         "pixels"),
        ("a truncated PNG", {"first_image": {"filename": "k.png", "data": png(64, 48, cut=40)}}, ""),
        ("text as a picture", {"first_image": {"filename": "k.png", "data": b"not a picture at all" * 50}}, ""),
    ]
    peak_known = reset_peak(s.proc.pid)
    before = rss_kb(s.proc.pid)
    worst = before
    for what, fields, word in cases:
        body = dict(GOOD)
        for k, v in fields.items():
            if k == "references":
                body[k] = [dict(r, data=base64.b64encode(r["data"]).decode()) for r in v]
            else:
                body[k] = dict(v, data=base64.b64encode(v["data"]).decode())
        t = time.time()
        st, j = s.json("POST", "/v1/videos", body)
        msg = j.get("error", {}).get("message", "") if isinstance(j, dict) else ""
        check(st == 400 and word in msg and s.store not in msg,
              "%s: 400 in %.2f s (%s)" % (what, time.time() - t, msg[:150]))
        worst = max(worst, rss_kb(s.proc.pid))
    after = rss_kb(s.proc.pid)
    if peak_known:  # the true peak between the requests too, not only what the samples after each one saw
        worst = max(worst, status_kb(s.proc.pid, "VmHWM"))
    log("  server RSS: %d kB before, %d kB after, %d kB at most (%s; change %+d kB)" % (
        before, after, worst, "peak VmHWM since a reset" if peak_known else "sampled after each request",
        worst - before))
    check(worst - before < 8 * 1024, "hostile uploads moved the server's memory by %d kB (< 8 MB)" % (worst - before))
    left = os.listdir(os.path.join(s.store, "uploads")) if os.path.isdir(os.path.join(s.store, "uploads")) else []
    check(left == [], "refused uploads leave nothing in the store (%s)" % left)
    # A good keyframe still works, and the job object names no server path.
    body = dict(GOOD, first_image={"filename": "k.png", "data": base64.b64encode(png(64, 36)).decode()})
    st, j = s.json("POST", "/v1/videos", body)
    check(st == 202, "a real keyframe is accepted")
    j = s.wait_job(j["id"], timeout=60)
    text = json.dumps(j)
    check(j["status"] == "completed" and s.store not in text and os.path.abspath(s.store) not in text,
          "the job object carries no server path (%s)" % j["parameters"]["media"][0]["path"])


def store_lock(h3, s):
    log("one server per store")
    p = subprocess.run([h3, "serve", "--store", s.store, "--port", "0", "--runner", "fake"], capture_output=True,
                       timeout=60)
    err = p.stderr.decode(errors="replace")
    check(p.returncode != 0 and "another h3 serve" in err, "a second server on the store refuses to start: %s" %
          err.strip()[-200:])


def damaged_rows(h3):
    log("a row whose JSON does not parse, a metadata row nested 200k deep; leftover .partial files")
    s = Server(h3, args=["--runner", "fake", "--fake-step-ms", "20", "--fake-load-ms", "0"]).start()
    try:
        st, a = s.json("POST", "/v1/videos", GOOD)
        s.wait_job(a["id"], timeout=60)
    finally:
        s.stop()
    db = os.path.join(s.store, "jobs.sqlite3")
    c = sqlite3.connect(db)
    c.execute("UPDATE jobs SET result = '{not json' WHERE id = ?", (a["id"],))
    c.execute("INSERT INTO jobs (id, status, request, resolved, created_at) VALUES (?, 'queued', '{}', '[[[', ?)",
              ("video_" + "ab" * 12, time.time()))
    # The store's remembered model list nested 200,000 deep (nlohmann's parser recursed off the stack at start).
    c.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('models', ?)", ("[" * 200000 + "]" * 200000,))
    c.commit()
    c.close()
    partial = os.path.join(s.store, "outputs", "video_" + "cd" * 12 + ".mp4.partial")
    with open(partial, "wb") as f:
        f.write(b"half a video")
    try:
        s.start()
        check(not os.path.exists(partial), "a leftover .partial file is removed at start")
        st, l = s.json("GET", "/v1/videos")
        check(st == 200 and len(l["data"]) == 2, "the list still answers with a damaged row")
        j = s.wait_job("video_" + "ab" * 12, timeout=60)
        check(j["status"] == "failed" and "damaged" in j["error"]["message"],
              "the damaged queued job fails with the reason: %s" % j["error"]["message"])
        st, j = s.json("GET", "/v1/videos/" + a["id"])
        check(st == 200 and j["status"] == "completed", "the completed job is still there")
        st, j = s.json("POST", "/v1/videos", GOOD)
        check(st == 202 and s.wait_job(j["id"], timeout=60)["status"] == "completed", "the queue goes on")
    finally:
        s.stop()
    # A malformed database page: the server refuses to start and says what to do.
    with open(db, "r+b") as f:
        f.seek(4096 + 8)
        f.write(b"\xff" * 512)
    for sfx in ("-wal", "-shm"):
        if os.path.exists(db + sfx):
            os.remove(db + sfx)
    p = subprocess.run([h3, "serve", "--store", s.store, "--port", "0", "--runner", "fake"], capture_output=True,
                       timeout=60)
    err = p.stderr.decode(errors="replace")
    check(p.returncode != 0 and "damaged" in err and "move it aside" in err,
          "a damaged database refuses to start, saying what to do: %s" % err.strip()[-200:])
    s.cleanup()


def full_disk(h3):
    """Run alone (--full-disk, its own CTest entry): mounts a 3 MB tmpfs as the store's disk, as root or else inside
    a user + mount namespace (unshare -rm); exits 77 (SKIPPED LOUDLY) when the machine allows neither."""
    log("the store's disk fills up mid-job")
    mnt = tempfile.mkdtemp(prefix="h3serve-tmpfs-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", mnt], capture_output=True)
    if r.returncode != 0:
        why = r.stderr.decode().strip()
        os.rmdir(mnt)
        if not os.environ.get("H3_TEST_IN_USERNS"):
            log("  cannot mount a tmpfs here (%s); trying in a user namespace (unshare -rm)" % why)
            env = dict(os.environ, H3_TEST_IN_USERNS="1")
            try:
                p = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", sys.executable,
                                    os.path.abspath(__file__), h3, "--full-disk"], env=env, timeout=300)
                if p.returncode != SKIP:
                    sys.exit(p.returncode)
            except OSError as e:
                log("  unshare: %s" % e)
        log("SKIPPED LOUDLY: cannot mount a tmpfs here (%s), nor in a user namespace; the full-disk case was not "
            "run" % why)
        sys.exit(SKIP)
    try:
        store = os.path.join(mnt, "store")
        s = Server(h3, store=store, args=["--runner", "fake", "--fake-step-ms", "300", "--fake-load-ms", "0"])
        s.log_path = os.path.join(tempfile.mkdtemp(), "server.log")
        s.start()
        try:
            st, j = s.json("POST", "/v1/videos", dict(GOOD, steps=8))
            s.wait_job(j["id"], statuses=("in_progress",), timeout=30)
            filler = os.path.join(mnt, "filler")
            # Unbuffered, and ENOSPC caught wherever it comes (the open itself when the job's own output filled the
            # disk first, a write, or the close).
            try:
                with open(filler, "wb", buffering=0) as f:
                    while True:
                        f.write(b"\0" * 65536)
            except OSError:
                pass
            j = s.wait_job(j["id"], timeout=60)
            log("  the job ended %s: %s" % (j["status"], (j.get("error") or {}).get("message", "")[:160]))
            check(j["status"] == "failed", "the job whose output could not be written failed")
            st, h, _ = s.request("GET", "/health")
            check(st == 200 and s.proc.poll() is None, "the server stays up with a full disk")
            st, l = s.json("GET", "/v1/videos")
            check(st == 200 and [x["status"] for x in l["data"]] == ["failed"],
                  "the API still answers with the disk full (the list: %s)" % [x["status"] for x in l["data"]])
            os.remove(filler)
            st, j = s.json("POST", "/v1/videos", GOOD)
            check(st == 202 and s.wait_job(j["id"], timeout=60)["status"] == "completed",
                  "with space again the next job completes")
        finally:
            s.stop()
    finally:
        subprocess.run(["umount", mnt])
        os.rmdir(mnt)


def run(h3):
    if "--full-disk" in sys.argv[2:]:
        full_disk(h3)
        return
    s = Server(h3, args=["--runner", "fake", "--fake-step-ms", "20", "--fake-load-ms", "0", "--max-body", "4000000"])
    s.start()
    try:
        hostile_uploads(s)
        store_lock(h3, s)
    except Exception:
        s.dump_log()
        raise
    finally:
        s.cleanup()
    damaged_rows(h3)


if __name__ == "__main__":
    main_wrapper(run)
