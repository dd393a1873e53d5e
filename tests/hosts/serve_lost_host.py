#!/usr/bin/env python3
"""h3 serve on simulated hosts (run by simhosts.sh on host 0, the supervisor's host): the rank group spans the
hosts; host 1's link is cut while a job runs -> the job fails naming host 1, /health says why the group is down
while the host is away, and once the link is back the group is recreated and a new job completes.
usage: serve_lost_host.py H3_BINARY   (SIM_NP, SIM_LOST_NS, SIM_LOST_HOST from simhosts.sh)"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "serve"))
from serve_common import Server, check, log, main_wrapper, running  # noqa: E402

REQ = {"prompt": "a kite", "width": 64, "height": 64, "frames": 124, "steps": 40}


def link(ns, state):
    subprocess.run(["ip", "-n", ns, "link", "set", "eth0", state], check=True)


def run(h3):
    n, ns, host = int(os.environ["SIM_NP"]), os.environ["SIM_LOST_NS"], os.environ["SIM_LOST_HOST"]
    s = Server(h3, ranks=n, timeout=8,
               args=["--runner", "fake", "--fake-step-ms", "250", "--startup-timeout", "20", "--max-attempts", "1"])
    with running(s.start(timeout=120)) as s:
        st, h = s.json("GET", "/health")
        check(st == 200 and h["group"] in ("ready", "busy"), "group of %d ranks over the hosts is ready: %s" % (n, h))
        st, j = s.json("POST", "/v1/videos", REQ)
        check(st == 202, "job accepted: %s" % j.get("id", j))
        jid = j["id"]
        deadline = time.time() + 60
        while time.time() < deadline:
            st, j = s.json("GET", "/v1/videos/" + jid)
            if j.get("status") == "in_progress" and j.get("step", 0) >= 2:
                break
            time.sleep(0.1)
        check(j.get("step", 0) >= 2, "job denoising (step %s)" % j.get("step"))
        t_cut = time.time()
        link(ns, "down")
        log("cut %s's link" % host)
        j = s.wait_job(jid, timeout=90)
        err = (j.get("error") or {}).get("message", "")
        check(j["status"] == "failed" and host in err,
              "job failed %.1f s after the cut, naming %s: %s" % (time.time() - t_cut, host, err[:300]))
        # While the host is away the group cannot start; /health says so.
        deadline, h = time.time() + 60, {}
        while time.time() < deadline:
            st, h = s.json("GET", "/health")
            if st != 200 and h.get("last_error"):
                break
            time.sleep(0.5)
        check(h.get("status") == "unavailable" and h.get("last_error"),
              "group down with a clear status while %s is away: %s" % (host, h))
        time.sleep(5)
        t_back = time.time()
        link(ns, "up")
        log("restored %s's link" % host)
        s.wait_ready(timeout=180)
        st, h = s.json("GET", "/health")
        check(st == 200 and h["restarts"] >= 1,
              "group recreated %.1f s after the link came back (restarts %s)" % (time.time() - t_back, h["restarts"]))
        st, j = s.json("POST", "/v1/videos", dict(REQ, steps=4))
        check(st == 202, "new job accepted")
        j = s.wait_job(j["id"], timeout=120)
        check(j["status"] == "completed", "new job completed on the recreated group")


if __name__ == "__main__":
    main_wrapper(run)
