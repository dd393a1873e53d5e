#!/usr/bin/env python3
"""Soak: many mixed jobs against one `h3 serve`, then a report, and a failure when anything is off.

One server runs the real Generator (procedural mini models) with --debug-faults, so that most jobs can run on the
fake runner for speed (`x_debug_runner: "fake"`) and a share on the mini models, on the same rank group. Jobs come
from a fixed random sequence: sizes, durations, steps, n (1..3), priorities (0..3, so running jobs get suspended),
modes (t2va; fl2va and ref2va with an uploaded picture), cancels (queued and running), deletes of finished jobs, and
bad requests (refused with 400) interleaved; CLIENTS threads submit and follow them while one more reads /v1/events.

It checks and reports:
  - every job ended as expected: completed, or cancelled when a cancel was accepted while it could still stop it;
    no job failed; bad requests were refused;
  - 0 crashes: the server is up, the rank group never restarted;
  - supervisor and rank-group RSS and open file descriptors flat: after the last job within 10 % of their values
    after the warm-up (the first quarter of the jobs: caches, thread pools, the models' first runs of each kind, the
    server's event log (--event-log 512 here) filled), both taken with the server idle;
  - the store consistent: every file in outputs/ and every upload folder belongs to a job still listed; each
    completed job's videos are there with the size it reports; deleted jobs have no file left and answer 404;
  - the API's latency under load: p50, p99 and max over every request the clients made (p99 under --max-p99).

usage: soak.py H3_BINARY [--jobs N] [--real-share F] [--ranks R] [--clients C] [--seed S] [--report FILE]
CI runs it at 200 jobs (ctest -R serve.soak); the issue's 1,000: soak.py build/bin/h3 --jobs 1000"""
import argparse
import base64
import json
import os
import random
import re
import threading
import time

from serve_common import Server, check, log, run_checks, running

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PICTURE = base64.b64encode(open(os.path.join(ROOT, "examples", "first-frame.png"), "rb").read()).decode()
FAKE_SIZES = ["320x192", "448x256", "640x384", "768x448", "1344x768", "768x1344"]
REAL_SIZES = ["64x64", "128x64"]
TERMINAL = ("completed", "failed", "cancelled")


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))] if xs else 0.0


def proc_stats(pid):
    """(RSS bytes, open fds) of a process, or None when it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            rss = int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) * 1024
        return rss, len(os.listdir("/proc/%d/fd" % pid))
    except (OSError, AttributeError):
        return None


def descendants(pid):
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(d))
        except (OSError, ValueError, IndexError):
            pass
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def workers(server_pid):
    """The rank group's `h3 serve-worker` processes (under mpirun with several ranks)."""
    out = []
    for p in descendants(server_pid):
        try:
            with open("/proc/%d/cmdline" % p, "rb") as f:
                if b"serve-worker" in f.read() and b"mpirun" not in open("/proc/%d/comm" % p, "rb").read():
                    out.append(p)
        except OSError:
            pass
    return sorted(out)


def snapshot(server):
    sup = proc_stats(server.proc.pid)
    ws = [proc_stats(p) for p in workers(server.proc.pid)]
    ws = [w for w in ws if w]
    return {"supervisor_rss": sup[0], "supervisor_fds": sup[1], "workers": len(ws),
            "worker_rss": sum(w[0] for w in ws), "worker_fds": sum(w[1] for w in ws)}


class Client:
    """One API client: every request timed."""

    def __init__(self, server, latencies, lock):
        self.s, self.lat, self.lock = server, latencies, lock

    def call(self, method, path, body=None, raw=None, headers=None):
        t = time.time()
        st, h, p = self.s.request(method, path, body, raw=raw, headers=headers, timeout=60)
        dt = time.time() - t
        with self.lock:
            self.lat.append(dt)
        try:
            return st, json.loads(p) if p and p[:1] in b"{[" else p
        except ValueError:
            return st, p


def make_job(rng, real_share):
    """A job's body, what it tests and whether it runs on the mini models."""
    real = rng.random() < real_share
    body = {"prompt": "soak %d" % rng.randrange(10 ** 6), "seed": rng.randrange(2 ** 31)}
    if real:
        body.update(size=rng.choice(REAL_SIZES), seconds=5, steps=rng.choice([2, 3, 4]))
    else:
        body.update(size=rng.choice(FAKE_SIZES), steps=rng.randrange(2, 9), x_debug_runner="fake")
        body["seconds"] = rng.choice([5, 5, 5, 6, 8])
    if rng.random() < 0.2:
        body["n"] = rng.choice([2, 3])
    if rng.random() < 0.3:
        body["priority"] = rng.randrange(0, 4)
    mode = rng.random()
    if mode < 0.08:
        if not real:
            body.pop("size")  # fl2va: the keyframe's aspect at 768p (a real job keeps its small size)
        body["first_image"] = {"data": PICTURE, "filename": "key.png"}
    elif mode < 0.14:
        body["references"] = [{"kind": "image", "data": PICTURE, "filename": "ref.png"}]
    return body, real


BAD = [
    ({"prompt": "x", "n": 9}, "'n'"),
    ({"prompt": "x", "priority": -1}, "'priority'"),
    ({"prompt": "x", "size": "333x111"}, "size"),
    ({"prompt": "x", "steps": 1}, "steps"),
    ({"prompt": "x", "colour": "red"}, "unknown field"),
    ({"prompt": "", "steps": 4}, "prompt"),
    ({"prompt": "x", "first_image": {"data": "bm90IGEgcGljdHVyZQ==", "filename": "x.png"}}, "first keyframe"),
]


def run_soak(args):
    rng = random.Random(args.seed)
    plan = []  # (kind, body, real, cancel_after)
    for i in range(args.jobs):
        r = rng.random()
        if r < 0.08:
            plan.append(("bad", rng.choice(BAD), False, None))
        else:
            body, real = make_job(rng, args.real_share)
            cancel = rng.choice([0.0, 0.02, 0.05]) if rng.random() < 0.1 else None
            plan.append(("job", body, real, cancel))
    server_args = ["--runner", "generator", "--debug-faults", "--fake-step-ms", "2", "--fake-load-ms", "0",
                   "--preview-every", "2", "--max-queue", "1000", "--http-threads", "8",
                   # A short event log fills during the warm-up, so what grows after it is no bounded buffer filling.
                   "--event-log", "512"]
    lat, lock = [], threading.Lock()
    outcome = {"submitted": 0, "refused": 0, "completed": 0, "failed": 0, "cancelled": 0, "expected_cancel": 0,
               "late_cancel": 0, "deleted": 0, "real": 0, "videos": 0, "preempted_jobs": 0, "unexpected": []}
    jobs = {}  # id -> {"real", "cancel_ok", "final", "deleted"}
    events = {"video": 0, "preview": 0, "group": 0}
    started = time.time()
    with running(Server(args.h3, ranks=args.ranks, args=server_args).start(timeout=600)) as s:
        stop_events = threading.Event()

        def watch():
            from serve_common import sse_events
            try:
                for ev, _ in sse_events(s, "/v1/events", until=lambda *_: stop_events.is_set(), timeout=7200):
                    events[ev] = events.get(ev, 0) + 1
            except Exception as e:  # noqa: BLE001 - reported as a failure below
                outcome["unexpected"].append("event stream: %r" % e)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        baseline = [None]
        finished = [0]
        window = threading.Semaphore(args.window)  # jobs in flight at once (bounds the queue)
        plan_lock = threading.Lock()
        cursor = [0]

        def follow(c, jid, real, cancel_after):
            info = {"real": real, "cancel_ok": False, "deleted": False}
            if cancel_after is not None:
                time.sleep(cancel_after)
                st, j = c.call("POST", "/v1/videos/%s/cancel" % jid, raw=b"{}")
                info["cancel_ok"] = st == 200
                if st != 200 and not (st == 409 and "completed" in json.dumps(j)):
                    outcome["unexpected"].append("cancel %s: %d %s" % (jid, st, j))
            deadline = time.time() + 600
            while time.time() < deadline:
                st, j = c.call("GET", "/v1/videos/" + jid)
                if st == 200 and j["status"] in TERMINAL:
                    break
                time.sleep(0.05 if not real else 0.2)
            info["final"] = j
            with lock:
                jobs[jid] = info
                finished[0] += 1
            # Delete a third of the finished jobs (their files must go).
            if rng_local(jid).random() < 0.33:
                st, d = c.call("DELETE", "/v1/videos/" + jid)
                if st == 200:
                    info["deleted"] = True
                else:
                    outcome["unexpected"].append("delete %s: %d %s" % (jid, st, d))

        def rng_local(jid):
            return random.Random(jid)

        def client_loop(k, stop_at):
            c = Client(s, lat, lock)
            while True:
                with plan_lock:
                    if cursor[0] >= stop_at:
                        return
                    kind, body, real, cancel_after = plan[cursor[0]]
                    cursor[0] += 1
                if kind == "bad":
                    b, what = body
                    st, j = c.call("POST", "/v1/videos", b)
                    with lock:
                        outcome["refused"] += 1
                    if st != 400 or what not in json.dumps(j):
                        outcome["unexpected"].append("bad request %s: %d %s" % (b, st, str(j)[:200]))
                    continue
                window.acquire()
                try:
                    st, j = c.call("POST", "/v1/videos", body)
                    if st != 202:
                        outcome["unexpected"].append("submit %s: %d %s" % (body.get("size"), st, str(j)[:300]))
                        continue
                    with lock:
                        outcome["submitted"] += 1
                    follow(c, j["id"], real, cancel_after)
                finally:
                    window.release()

        def run_part(stop_at):
            """The plan up to `stop_at` on the client threads, until every job of it has ended."""
            threads = [threading.Thread(target=client_loop, args=(k, stop_at)) for k in range(args.clients)]
            for t in threads:
                t.start()
            last = time.time()
            while any(t.is_alive() for t in threads):
                time.sleep(1)
                if time.time() - last > 30:
                    last = time.time()
                    log("  ... %d of %d jobs finished, %.0f s" % (finished[0], args.jobs, time.time() - started))
            for t in threads:
                t.join()
            time.sleep(1.0)  # the last job's end settles (group back to ready, streams written)

        # Both measurements are taken with the server idle (every job so far ended), so neither counts a running
        # job's memory or a client's open connection.
        run_part(args.warmup)
        baseline[0] = snapshot(s)
        run_part(len(plan))
        end = snapshot(s)
        st, health = s.json("GET", "/health")
        stop_events.set()  # the watcher stops at its next event, or when the server stops

        # --- outcomes
        for jid, info in jobs.items():
            j = info["final"]
            status = j["status"]
            outcome[status] = outcome.get(status, 0) + 1
            outcome["real"] += 1 if info["real"] else 0
            outcome["preempted_jobs"] += 1 if j.get("preemptions") else 0
            if status == "completed":
                outcome["videos"] += j.get("n", 1)
                if info["cancel_ok"]:
                    outcome["late_cancel"] += 1  # accepted while running, but the job was already past its last check
            elif status == "cancelled":
                outcome["expected_cancel"] += 1
                if not info["cancel_ok"]:
                    outcome["unexpected"].append("%s cancelled without a cancel" % jid)
            else:
                outcome["unexpected"].append("%s %s: %s" % (jid, status, (j.get("error") or {}).get("message")))
            outcome["deleted"] += 1 if info["deleted"] else 0

        # --- the store
        store_problems = []
        live = {jid: info for jid, info in jobs.items() if not info["deleted"]}
        outputs = os.path.join(s.store, "outputs")
        for name in os.listdir(outputs):
            jid = name[:30]
            if jid not in live:
                store_problems.append("outputs/%s belongs to no listed job" % name)
            elif name.endswith(".partial"):
                store_problems.append("outputs/%s left unfinished" % name)
        for jid, info in live.items():
            st, j = s.json("GET", "/v1/videos/" + jid)
            if st != 200:
                store_problems.append("%s: GET %d" % (jid, st))
                continue
            if j["status"] == "completed":
                for v in j["videos"]:
                    path = os.path.join(outputs, jid + (".mp4" if v["index"] == 0 else "-%d.mp4" % v["index"]))
                    if not os.path.isfile(path) or os.path.getsize(path) != v.get("bytes"):
                        store_problems.append("%s video %d: file missing or of another size" % (jid, v["index"]))
        for jid, info in jobs.items():
            if info["deleted"]:
                st, _ = s.json("GET", "/v1/videos/" + jid)
                if st != 404:
                    store_problems.append("deleted %s answers %d" % (jid, st))
        upload_dirs = set(os.listdir(os.path.join(s.store, "uploads"))) if os.path.isdir(
            os.path.join(s.store, "uploads")) else set()
        used = set()
        for jid in live:
            st, j = s.json("GET", "/v1/videos/" + jid)
            for m in (j.get("parameters") or {}).get("media") or []:
                used.add(m["path"].split("/")[1])
        for d in upload_dirs - used:
            store_problems.append("uploads/%s belongs to no listed job" % d)

    # --- the report
    base = baseline[0] or end
    growth = {k: (end[k] - base[k]) / max(base[k], 1) for k in ("supervisor_rss", "supervisor_fds", "worker_rss",
                                                                 "worker_fds")}
    report = {
        "jobs": args.jobs, "seconds": round(time.time() - started, 1), "ranks": args.ranks,
        "outcome": {k: v for k, v in outcome.items() if k != "unexpected"},
        "unexpected": outcome["unexpected"][:20],
        "events": events,
        "health": {k: health.get(k) for k in ("status", "group", "generation", "restarts")},
        "after_warmup": base, "at_end": end, "growth": {k: round(v, 4) for k, v in growth.items()},
        "latency_s": {"requests": len(lat), "p50": round(percentile(lat, 50), 4), "p99": round(percentile(lat, 99), 4),
                      "max": round(max(lat) if lat else 0, 4)},
        "store_problems": store_problems[:20],
    }
    log(json.dumps(report, indent=2))
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=2)
    o = report["outcome"]
    check(not report["unexpected"], "every job ended as expected (%d completed, %d cancelled as asked, %d failed; "
          "%d bad requests refused; %d on the mini models; %d suspended for others at least once)" %
          (o["completed"], o["cancelled"], o["failed"], o["refused"], o["real"], o["preempted_jobs"]))
    check(o["completed"] + o["cancelled"] == o["submitted"] and o["failed"] == 0, "no job failed or was lost")
    check(health.get("status") == "ok" and health.get("restarts") == 0 and health.get("generation") == 1,
          "0 crashes: the server is up and its rank group never restarted")
    for k, g in growth.items():
        # Descriptors are few (a worker holds 5 or 6): one more or less is no trend.
        ok = abs(g) <= 0.10 or (k.endswith("fds") and abs(end[k] - base[k]) <= 1)
        check(ok, "%s flat: %s after the warm-up, %s at the end (%+.1f %%)" % (k, base[k], end[k], 100 * g))
    check(end["workers"] == args.ranks, "the rank group has its %d worker(s)" % args.ranks)
    check(not store_problems, "the store is consistent (every file and upload belongs to a listed job, every "
          "completed video is there, deleted jobs are gone)")
    check(events.get("preview", 0) > 0 and events.get("video", 0) > o["submitted"], "events kept coming (%s)" % events)
    check(report["latency_s"]["p99"] <= args.max_p99, "p99 API latency %.3f s (p50 %.3f s, max %.3f s) over %d "
          "requests" % (report["latency_s"]["p99"], report["latency_s"]["p50"], report["latency_s"]["max"], len(lat)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("h3")
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--real-share", type=float, default=0.05, help="share of jobs on the mini models")
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--clients", type=int, default=6)
    p.add_argument("--window", type=int, default=12, help="jobs in flight at once")
    p.add_argument("--warmup", type=int, default=0, help="finished jobs before the baseline (default: a quarter)")
    p.add_argument("--seed", type=int, default=39)
    p.add_argument("--max-p99", type=float, default=2.0)
    p.add_argument("--report")
    args = p.parse_args()
    if not args.warmup:
        args.warmup = max(40, args.jobs // 4)
    run_checks(run_soak, args)


if __name__ == "__main__":
    main()
