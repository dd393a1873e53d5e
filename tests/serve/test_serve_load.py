#!/usr/bin/env python3
"""h3 serve under load: 200 concurrent clients, each holding one SSE stream of /v1/events while polling job status
and the list, for DURATION seconds, while jobs run. No error, no stuck connection, events keep arriving.
usage: test_serve_load.py H3_BINARY [DURATION_S]"""
import sys
import threading
import time

from serve_common import Server, check, log, main_wrapper, running

CLIENTS = 200


def run(h3):
    duration = float(sys.argv[2]) if len(sys.argv) > 2 else 20
    with running(Server(h3, ranks=1, args=["--runner", "fake", "--fake-step-ms", "100", "--fake-load-ms", "0",
                                           "--http-threads", "16"]).start()) as s:
        ids = []
        for i in range(4):
            st, j = s.json("POST", "/v1/videos", {"prompt": "load %d" % i, "seconds": 5, "steps": 30, "seed": i})
            ids.append(j["id"])
        stop_at = time.time() + duration
        errors, polls, events = [], [0] * CLIENTS, [0] * CLIENTS
        lock = threading.Lock()

        def sse(k):
            try:
                c = s.conn(timeout=30)
                c.request("GET", "/v1/events", headers={"Accept": "text/event-stream"})
                r = c.getresponse()
                if r.status != 200:
                    raise RuntimeError("SSE HTTP %d" % r.status)
                while time.time() < stop_at:
                    line = r.fp.readline()
                    if not line:
                        raise RuntimeError("SSE stream closed by the server")
                    if line.startswith(b"event:"):
                        events[k] += 1
                c.close()
            except Exception as e:
                with lock:
                    errors.append("sse %d: %r" % (k, e))

        def poll(k):
            try:
                c = s.conn(timeout=30)  # keep-alive: one connection for many requests
                n = 0
                while time.time() < stop_at:
                    path = "/v1/videos/" + ids[(k + n) % len(ids)] if n % 3 else "/v1/videos?limit=10"
                    c.request("GET", path)
                    r = c.getresponse()
                    body = r.read()
                    if r.status != 200:
                        raise RuntimeError("GET %s -> %d %r" % (path, r.status, body[:100]))
                    n += 1
                    polls[k] += 1
                    time.sleep(0.25)
                c.close()
            except Exception as e:
                with lock:
                    errors.append("poll %d: %r" % (k, e))

        threads = [threading.Thread(target=sse, args=(k,)) for k in range(CLIENTS)]
        threads += [threading.Thread(target=poll, args=(k,)) for k in range(CLIENTS)]
        t0 = time.time()
        for t in threads:
            t.start()
        st, h, p = s.request("GET", "/metrics")
        for t in threads:
            t.join(duration + 60)
        stuck = sum(t.is_alive() for t in threads)
        log("  %d clients x (SSE + polling) for %.0f s: %d polls, %d events, %d errors, %d stuck" %
            (CLIENTS, time.time() - t0, sum(polls), sum(events), len(errors), stuck))
        for e in errors[:10]:
            log("   ", e)
        check(not errors, "no client error")
        check(stuck == 0, "no stuck connection")
        check(min(polls) > 0 and min(events) > 0, "every client got answers and events (min polls %d, min events %d)"
              % (min(polls), min(events)))
        st, h = s.json("GET", "/health")
        check(st == 200, "server healthy afterwards")
        for jid in ids:
            s.request("POST", "/v1/videos/%s/cancel" % jid)


if __name__ == "__main__":
    main_wrapper(run)
