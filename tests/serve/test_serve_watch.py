#!/usr/bin/env python3
"""Watching jobs while they run (issue 39) against a live `h3 serve`:
  fake            the fake runner: `preview` events on the job's stream and on /v1/events, the latest at
                  content?variant=preview; n = 3 videos with seeds S, S+1, S+2, each downloadable; a job of higher
                  priority suspends the running one at its next step and starts within about one step, the suspended
                  one resumes with the values it would have had; queue position and ETA; a cancel within one step;
                  bad n / priority / index refused.
  mini RANKS      the real Generator (procedural mini models) on RANKS ranks: previews (PNG) while denoising, a job
                  suspended by one of higher priority ends with latents bitwise those of the same job never stopped,
                  n = 2 gives two videos with the two seeds.
usage: test_serve_watch.py H3_BINARY fake|mini [RANKS]"""
import json
import os
import sys
import threading
import time

from serve_common import Server, check, log, main_wrapper, running, safetensors_tensors, sse_events

PNG = b"\x89PNG\r\n\x1a\n"


def collect(server, path, out, stop_when=None, timeout=120):
    """Reads an SSE stream into `out` (a list of (event, data)) on a thread; returns it."""
    def read():
        for ev, d in sse_events(server, path, until=stop_when, timeout=timeout):
            out.append((ev, d))
    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def submit(s, body):
    st, j = s.json("POST", "/v1/videos", body)
    check(st == 202, "accepted %s: %s" % (json.dumps({k: v for k, v in body.items() if k != "prompt"}),
                                           j.get("id", j)))
    return j


def refusals(s):
    for body, what in (({"n": 9}, "'n' must be an integer 1 .. 8"), ({"n": 0}, "'n'"), ({"n": "3"}, "'n'"),
                       ({"priority": -1}, "'priority' must be an integer 0 .. 100"), ({"priority": 1.5}, "'priority'"),
                       ({"x_debug_runner": "fake"}, "x_debug_runner")):
        st, j = s.json("POST", "/v1/videos", dict({"prompt": "x"}, **body))
        msg = j.get("error", {}).get("message", "")
        check(st == 400 and what in msg, "%s refused: %s" % (json.dumps(body), msg))


def run_fake(h3):
    # 200 ms per step: long enough to see the step boundaries, short enough for a test of seconds.
    args = ["--runner", "fake", "--fake-step-ms", "200", "--fake-load-ms", "0", "--preview-every", "2"]
    with running(Server(h3, args=args).start()) as s:
        refusals(s)
        # 1. Previews: 9 steps (8 calls) -> after calls 2, 4, 6; each on the job's stream with its URL, a PNG there.
        every = []
        t_all = collect(s, "/v1/events", every, stop_when=lambda ev, d: ev == "preview" and d.get("step") == 6)
        time.sleep(0.3)
        a = submit(s, {"prompt": "a kite", "size": "320x192", "steps": 9, "seed": 4})
        events = []
        for ev, d in sse_events(s, "/v1/videos/%s/events" % a["id"], timeout=60):
            events.append((ev, d))
            if ev == "preview" and len([e for e in events if e[0] == "preview"]) == 1:
                st, h, p = s.request("GET", d["url"])
                check(st == 200 and p.startswith(PNG) and h.get("Content-Type") == "image/png",
                      "the preview at its URL is a PNG while the job runs (%d bytes)" % len(p))
                st, j = s.json("GET", "/v1/videos/" + a["id"])
                check(j["status"] == "in_progress" and j.get("preview_url") == d["url"],
                      "the running job names its preview_url")
        steps = [d["step"] for ev, d in events if ev == "preview"]
        check(steps == [2, 4, 6], "preview events after DiT calls 2, 4, 6 of 8: %s" % steps)
        first = [d for ev, d in events if ev == "preview"][0]
        check(first["object"] == "video.preview" and first["steps"] == 8 and first["width"] > 0 and
              first["url"] == "/v1/videos/%s/content?variant=preview" % a["id"], "a preview event's fields: %s" % first)
        t_all.join(30)
        check(any(ev == "preview" for ev, _ in every), "preview events on /v1/events too")
        check(events[-1][0] == "video" and events[-1][1]["status"] == "completed", "the job's stream ends completed")
        st, h, p = s.request("GET", "/v1/videos/%s/content?variant=preview" % a["id"])
        check(st == 200 and p.startswith(PNG), "the latest preview is kept after the job completed")

        # 2. n = 3: three videos, seeds S..S+2, each downloadable and different; index checked.
        b = submit(s, {"prompt": "three of a kind", "size": "320x192", "steps": 3, "seed": 40, "n": 3})
        check(b["n"] == 3 and [v["seed"] for v in b["videos"]] == [40, 41, 42], "n = 3: seeds 40, 41, 42")
        b = s.wait_job(b["id"])
        check(b["status"] == "completed" and all(v["status"] == "completed" for v in b["videos"]),
              "all three videos completed")
        bodies = []
        for v in b["videos"]:
            st, h, p = s.request("GET", v["content_url"])
            check(st == 200 and p[4:8] == b"ftyp" and len(p) == v["bytes"],
                  "video %d downloads at %s (%d bytes)" % (v["index"], v["content_url"], len(p)))
            bodies.append(p)
            st, h, t = s.request("GET", v["thumbnail_url"])
            check(st == 200 and t.startswith(PNG), "video %d has its poster" % v["index"])
        check(len(set(bodies)) == 3, "three different videos")
        st, j = s.json("GET", "/v1/videos/%s/content?index=3" % b["id"])
        check(st == 400 and "0 .. 2" in j["error"]["message"], "index 3 of n = 3 refused: %s" % j["error"]["message"])
        lone = submit(s, {"prompt": "alone", "size": "320x192", "steps": 3, "seed": 41})
        lone = s.wait_job(lone["id"])
        st, h, p = s.request("GET", lone["content_url"])
        check(p == bodies[1], "video 1 of n = 3 (seed 41) is the video a job of seed 41 makes alone")

        # 3. Priority: A (50 steps) runs; B (priority 5) waits at most about one step, A is suspended, resumes and
        #    ends with the values an A never stopped has (latent_hash); C (priority 0) queues behind A with an ETA.
        ref = s.wait_job(submit(s, {"prompt": "long", "size": "320x192", "steps": 21, "seed": 77})["id"])
        a = submit(s, {"prompt": "long", "size": "320x192", "steps": 21, "seed": 77})
        s.wait_job(a["id"], statuses=("in_progress",))
        for _ in range(100):
            if s.json("GET", "/v1/videos/" + a["id"])[1].get("step", 0) >= 3:
                break
            time.sleep(0.05)
        c = submit(s, {"prompt": "after", "size": "320x192", "steps": 3, "seed": 5})
        check(c["queue_position"] == 1 and c["priority"] == 0 and c.get("queue_eta_seconds") is not None,
              "C queued at position 1 with an ETA of %s s" % c.get("queue_eta_seconds"))
        t0 = time.time()
        bj = submit(s, {"prompt": "urgent", "size": "320x192", "steps": 3, "seed": 6, "priority": 5})
        check(bj["queue_position"] == 1, "B (priority 5) is first in the queue at once")
        st, cj = s.json("GET", "/v1/videos/" + c["id"])
        check(cj["queue_position"] == 2, "C moved to position 2 behind B")
        bj = s.wait_job(bj["id"], statuses=("in_progress", "completed"))
        waited = time.time() - t0
        check(waited < 1.0, "B started %.2f s after it was submitted (one step is 0.2 s)" % waited)
        st, aj = s.json("GET", "/v1/videos/" + a["id"])
        check(aj["status"] == "queued" and aj["preemptions"] == 1 and aj["queue_position"] == 1 and aj["step"] >= 3,
              "A suspended at step %s, first in the queue again" % aj["step"])
        aj = s.wait_job(a["id"])
        check(aj["status"] == "completed" and aj["result"]["latent_hash"] == ref["result"]["latent_hash"],
              "A resumed and completed with the values of an A never stopped (%s)" % aj["result"]["latent_hash"])
        cj = s.wait_job(c["id"])
        check(cj["status"] == "completed" and cj["started_at"] >= aj["completed_at"] - 1, "C ran after A")

        # 4. Cancel within one step: asked mid-denoise, the job is cancelled within about a step.
        d = submit(s, {"prompt": "cancel me", "size": "320x192", "steps": 40, "seed": 8})
        s.wait_job(d["id"], statuses=("in_progress",))
        time.sleep(0.5)
        t0 = time.time()
        s.json("POST", "/v1/videos/%s/cancel" % d["id"])
        dj = s.wait_job(d["id"])
        took = time.time() - t0
        check(dj["status"] == "cancelled" and took < 0.8, "cancelled %.2f s after asking (a step is 0.2 s)" % took)

        # 5. A suspended job cancelled while queued: cancelled, its state dropped; the server goes on.
        e = submit(s, {"prompt": "long again", "size": "320x192", "steps": 30, "seed": 9})
        s.wait_job(e["id"], statuses=("in_progress",))
        time.sleep(0.5)
        f = submit(s, {"prompt": "urgent again", "size": "320x192", "steps": 6, "seed": 10, "priority": 9})
        for _ in range(100):
            if s.json("GET", "/v1/videos/" + e["id"])[1]["status"] == "queued":
                break
            time.sleep(0.05)
        st, ej = s.json("POST", "/v1/videos/%s/cancel" % e["id"])
        check(ej["status"] == "cancelled", "the suspended job cancelled while queued")
        check(s.wait_job(f["id"])["status"] == "completed", "the urgent job completed")
        # 6. A job suspended before its first step (the suspend reached the ranks with the job) resumes once and
        #    completes: the suspend is not found again when it starts the second time.
        g = submit(s, {"prompt": "first", "size": "320x192", "steps": 6, "seed": 11})
        h = submit(s, {"prompt": "second", "size": "320x192", "steps": 3, "seed": 12, "priority": 1})
        gj, hj = s.wait_job(g["id"], timeout=30), s.wait_job(h["id"], timeout=30)
        check(gj["status"] == "completed" and hj["status"] == "completed" and gj["preemptions"] <= 1,
              "a job suspended at once resumes and completes (preempted %d time)" % gj["preemptions"])
        st, h = s.json("GET", "/health")
        check(h["restarts"] == 0 and h["status"] == "ok", "no rank group restart")


def run_mini(h3, ranks):
    args = ["--runner", "generator", "--write-latents", "--preview-every", "2"]
    req = {"prompt": "a lighthouse at dusk", "size": "128x64", "seconds": 5, "steps": 9, "seed": 31}
    with running(Server(h3, ranks=ranks, args=args).start(timeout=600)) as s:
        # A reference job, then the same job suspended after a few steps by one of higher priority.
        ref = s.wait_job(submit(s, req)["id"], timeout=600)
        check(ref["status"] == "completed", "the reference job completed")
        a = submit(s, req)
        previews = []
        for ev, d in sse_events(s, "/v1/videos/%s/events" % a["id"], timeout=600,
                                until=lambda ev, d: ev == "preview"):
            if ev == "preview":
                previews.append(d)
        check(previews and previews[0]["step"] == 2, "a preview after DiT call 2 (%d rank(s))" % ranks)
        st, h, p = s.request("GET", previews[0]["url"])
        check(st == 200 and p.startswith(PNG), "the preview is a PNG (%d bytes)" % len(p))
        b = submit(s, {"prompt": "urgent", "size": "128x64", "seconds": 5, "steps": 3, "seed": 32, "priority": 1,
                       "n": 2})
        bj = s.wait_job(b["id"], timeout=600)
        check(bj["status"] == "completed" and [v["seed"] for v in bj["videos"]] == [32, 33],
              "the urgent job (n = 2, seeds 32 and 33) completed")
        aj = s.wait_job(a["id"], timeout=600)
        check(aj["status"] == "completed" and aj["preemptions"] == 1,
              "the suspended job resumed and completed (preempted %d time)" % aj["preemptions"])
        out = os.path.join(s.store, "outputs")
        la = safetensors_tensors(os.path.join(out, a["id"] + ".latents.safetensors"))
        lr = safetensors_tensors(os.path.join(out, ref["id"] + ".latents.safetensors"))
        check(la.keys() == lr.keys() and all(la[k] == lr[k] for k in la),
              "its final latents are bitwise those of the same job never stopped")
        l0 = safetensors_tensors(os.path.join(out, b["id"] + ".latents.safetensors"))
        l1 = safetensors_tensors(os.path.join(out, b["id"] + "-1.latents.safetensors"))
        check(any(l0[k] != l1[k] for k in l0), "the urgent job's two videos differ")


def run(h3):
    kind = sys.argv[2] if len(sys.argv) > 2 else "fake"
    if kind == "fake":
        run_fake(h3)
    else:
        run_mini(h3, int(sys.argv[3]) if len(sys.argv) > 3 else 1)


if __name__ == "__main__":
    main_wrapper(run)
