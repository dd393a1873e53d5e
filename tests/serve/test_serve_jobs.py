#!/usr/bin/env python3
"""h3 serve on 2 ranks: five jobs (one cancelled mid-denoise, one whose rank 1 is killed), then the server killed
with jobs queued and restarted on the same store.
usage: test_serve_jobs.py H3_BINARY [--runner fake|generator] [extra serve args...]"""
import os
import sys
import threading
import time

from serve_common import Server, check, log, main_wrapper, sse_events, submit_jobs

STEP_MS = 150


def five_jobs(s, runner_args):
    log("five jobs on 2 ranks")
    base = {"prompt": "a paper boat on a river", "seconds": 5, "steps": 12}
    bodies = [dict(base, seed=1000 + i) for i in range(5)]
    bodies[2]["x_debug_fault"] = "1:3:kill"  # rank 1 kills itself at denoising step 3
    ids = submit_jobs(s, bodies)
    # Job 1: cancel mid-denoise, once it has done 2 steps; remember the step it was at.
    seen = {}

    def watch():
        for ev, d in sse_events(s, "/v1/videos/%s/events" % ids[1], timeout=240):
            if ev == "video":
                seen["last"] = d
                if d.get("phase") == "denoise" and d.get("step", 0) >= 2 and "cancel_at" not in seen:
                    seen["cancel_at"] = d["step"]
                    seen["cancel_t"] = time.time()
                    st, c = s.json("POST", "/v1/videos/%s/cancel" % ids[1])
                    seen["cancel_status"] = st

    t = threading.Thread(target=watch)
    t.start()
    t.join(300)
    last = seen.get("last", {})
    check(seen.get("cancel_status") == 200, "cancel accepted while job 1 was denoising (step %s)" %
          seen.get("cancel_at"))
    check(last.get("status") == "cancelled", "job 1 ends cancelled (the SSE stream closed on it)")
    j1 = s.wait_job(ids[1])
    check(j1["step"] <= seen["cancel_at"] + 1 and j1["step"] < j1["steps"],
          "cancelled within one step: asked at step %d, stopped at step %d of %d" % (seen["cancel_at"], j1["step"],
                                                                                    j1["steps"]))
    j2 = s.wait_job(ids[2], timeout=300)
    err = (j2.get("error") or {}).get("message", "")
    check(j2["status"] == "failed" and "rank 1" in err, "job 2 failed naming rank 1: %s" % err[:300])
    results = {}
    for k in (0, 3, 4):
        j = s.wait_job(ids[k], timeout=300)
        check(j["status"] == "completed" and j["bytes"] > 0, "job %d completed (%d bytes)" % (k, j["bytes"]))
        st, h, p = s.request("GET", j["content_url"])
        check(st == 200 and p[4:8] == b"ftyp" and len(p) == j["bytes"], "job %d MP4 downloaded" % k)
        results[ids[k]] = p
    st, h = s.json("GET", "/health")
    check(st == 200 and h["restarts"] >= 1, "the group was recreated after the kill (restarts %d)" % h["restarts"])
    return ids, results


def stalled(s):
    log("a stalled rank: the others' collective times out (--timeout) and names it; the next job completes")
    st, a = s.json("POST", "/v1/videos", {"prompt": "stall", "seconds": 5, "steps": 8, "seed": 7,
                                          "x_debug_fault": "1:3:stall"})
    st, b = s.json("POST", "/v1/videos", {"prompt": "after the stall", "seconds": 5, "steps": 4, "seed": 8})
    t = time.time()
    ja = s.wait_job(a["id"], timeout=120)
    err = (ja.get("error") or {}).get("message", "")
    check(ja["status"] == "failed" and "no data from rank 1" in err,
          "stalled job failed after %.0f s naming rank 1: %s" % (time.time() - t, err[:300]))
    jb = s.wait_job(b["id"], timeout=120)
    check(jb["status"] == "completed", "the next job completed on the recreated group")


def restart(h3, s, runner_args):
    log("server killed with jobs queued, restarted on the same store")
    base = {"prompt": "a lantern festival", "seconds": 5, "steps": 10}
    queued = []
    for i in range(3):
        st, j = s.json("POST", "/v1/videos", dict(base, seed=2000 + i))
        queued.append(j["id"])
    s.wait_job(queued[0], statuses=("in_progress",), timeout=120)
    st, before = s.json("GET", "/v1/videos?limit=100")
    s.kill()  # SIGKILL: no chance to tidy up
    check(s.proc.returncode != 0, "server killed")
    time.sleep(1)
    s2 = Server(h3, store=s.store, ranks=2, args=runner_args, timeout=8).start(wait_ready=False)
    st, after = s2.json("GET", "/v1/videos?limit=100")
    check(st == 200 and {j["id"] for j in after["data"]} == {j["id"] for j in before["data"]},
          "every job is still listed after the restart (%d)" % len(after["data"]))
    statuses = {j["id"]: j["status"] for j in after["data"]}
    check(all(statuses[q] in ("queued", "in_progress", "completed") for q in queued),
          "the running job was requeued and the queued ones kept: %s" % [statuses[q] for q in queued])
    done_before = [j for j in before["data"] if j["status"] == "completed"]
    for j in done_before:
        st, h, p = s2.request("GET", "/v1/videos/%s/content" % j["id"])
        check(st == 200 and len(p) == j["bytes"], "finished result %s still served" % j["id"][:12])
    s2.wait_ready(120)
    for q in queued:
        j = s2.wait_job(q, timeout=300)
        check(j["status"] == "completed", "queued job %s completed after the restart (attempts %d)" % (q[:12],
                                                                                                    j["attempts"]))
    return s2


def run(h3):
    extra = sys.argv[2:]
    runner_args = ["--runner", "fake", "--fake-step-ms", str(STEP_MS), "--fake-load-ms", "300", "--debug-faults",
                   "--stall-timeout", "60"] + extra
    s = Server(h3, ranks=2, args=runner_args, timeout=8).start()
    s2 = None
    try:
        five_jobs(s, runner_args)
        stalled(s)
        s2 = restart(h3, s, runner_args)
    except Exception:
        (s2 or s).dump_log()
        raise
    finally:
        if s2:
            s2.stop()
        s.cleanup()


if __name__ == "__main__":
    main_wrapper(run)
