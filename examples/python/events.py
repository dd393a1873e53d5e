#!/usr/bin/env python3
"""h3 serve's progress as server-sent events, with Python's standard library: submit a job, then read
GET /v1/videos/{id}/events (each frame is `event: video` with the job object as `data`) and print the phase,
step and ETA until the job ends; the stream closes itself after the final state. GET /v1/events carries every
job's events and the rank group's (`event: group`) for as long as the client stays.

    H3_URL=http://127.0.0.1:8190 python3 events.py ["a prompt"]

H3_URL, H3_API_KEY, H3_STEPS as in videos.py."""
import http.client
import json
import os
import sys
import urllib.parse

URL = urllib.parse.urlparse(os.environ.get("H3_URL", "http://127.0.0.1:8190"))
STEPS = int(os.environ.get("H3_STEPS", "8"))
HEADERS = {"Authorization": "Bearer " + os.environ["H3_API_KEY"]} if os.environ.get("H3_API_KEY") else {}

conn = http.client.HTTPConnection(URL.hostname, URL.port or 80, timeout=600)
prompt = sys.argv[1] if len(sys.argv) > 1 else "Rain on a tin roof, a cat watching from the window"
conn.request("POST", "/v1/videos", json.dumps({"prompt": prompt, "seconds": 5, "steps": STEPS}),
             dict(HEADERS, **{"Content-Type": "application/json"}))
r = conn.getresponse()
job = json.loads(r.read())
if r.status != 202:
    raise SystemExit("submit: %d %s" % (r.status, job["error"]["message"]))
print("submitted", job["id"])

conn.request("GET", "/v1/videos/%s/events" % job["id"], headers=dict(HEADERS, Accept="text/event-stream"))
stream = conn.getresponse()
event, data, last = None, "", None
for raw in stream:  # one line at a time; a blank line ends a frame
    line = raw.decode("utf-8").rstrip("\r\n")
    if line.startswith("event: "):
        event = line[7:]
    elif line.startswith("data: "):
        data += line[6:]
    elif line == "" and data:
        if event == "video":
            last = json.loads(data)
            eta = " eta %.0f s" % last["eta_seconds"] if last.get("eta_seconds") is not None else ""
            print("%-11s %-12s %3d/%-3d %5.1f%%%s" % (last["status"], last["phase"] or "-", last["step"], last["steps"],
                                                      last["progress"], eta))
        event, data = None, ""
    # lines starting with ':' are keep-alive comments; "retry:" is the reconnect delay
if not last or last["status"] != "completed":
    raise SystemExit("the job ended %s" % (last and last["status"]))
print("completed: %s (%d bytes) at %s%s" % (last["id"], last["bytes"], os.environ.get("H3_URL", ""), last["content_url"]))
