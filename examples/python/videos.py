#!/usr/bin/env python3
"""h3 serve from Python's standard library alone (urllib): create a video from text (JSON) and one from a first
frame (multipart/form-data, as the official SDKs send it), follow them, download each video and its poster, list
them page by page, read an error body, delete them. (The official Python SDK `openai` sends these same requests:
`client.videos.create(prompt=..., input_reference=open("first-frame.png", "rb"), seconds="4",
extra_body={"steps": 8})`, with `base_url=H3_URL + "/v1"`.)

    H3_URL=http://127.0.0.1:8190 python3 videos.py [IMAGE]

H3_URL: the server (default http://127.0.0.1:8190); H3_API_KEY: its --api-key, if any; H3_OUT: where the
downloads go (default: here); H3_STEPS: denoising steps (default 8: fast, rough)."""
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid

URL = os.environ.get("H3_URL", "http://127.0.0.1:8190")
OUT = os.environ.get("H3_OUT", ".")
STEPS = int(os.environ.get("H3_STEPS", "8"))
IMAGE = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                           "first-frame.png")


def call(method, path, body=None, content_type=None):
    """One request; returns (status, bytes). Error statuses are returned too (their body is JSON)."""
    headers = {}
    if os.environ.get("H3_API_KEY"):
        headers["Authorization"] = "Bearer " + os.environ["H3_API_KEY"]
    if content_type:
        headers["Content-Type"] = content_type
    req = urllib.request.Request(URL + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def api(method, path, body=None):
    status, data = call(method, path, json.dumps(body).encode() if body is not None else None,
                        "application/json" if body is not None else None)
    if status >= 400:
        raise RuntimeError("%s %s: %d %s" % (method, path, status, json.loads(data)["error"]["message"]))
    return json.loads(data)


def multipart(fields, files):
    """A multipart/form-data body: fields {name: text}, files {name: (filename, content_type, bytes)}."""
    boundary = "h3-" + uuid.uuid4().hex
    out = b""
    for name, value in fields.items():
        out += ('--%s\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n' % (boundary, name, value)).encode()
    for name, (filename, ctype, data) in files.items():
        out += ('--%s\r\nContent-Disposition: form-data; name="%s"; filename="%s"\r\nContent-Type: %s\r\n\r\n' %
                (boundary, name, filename, ctype)).encode() + data + b"\r\n"
    return out + ("--%s--\r\n" % boundary).encode(), "multipart/form-data; boundary=" + boundary


def check(ok, what):
    if not ok:
        raise SystemExit("check failed: " + what)
    print("ok:", what)


# 1. Text to video: the SDK's seconds "4" and size "1280x720" become the nearest H3 makes (see parameters.notes).
a = api("POST", "/v1/videos", {"model": "minimax-h3", "prompt": "A lighthouse on a cliff at dusk, waves below",
                               "seconds": "4", "size": "1280x720", "steps": STEPS, "seed": 7})
print("created %s: %s, %s s (%s)" % (a["id"], a["size"], a["seconds"], "; ".join(a["parameters"]["notes"])))
check(a["size"] == "1280x736" and a["seconds"] == "5.16667", "seconds 4 and size 1280x720 mapped")

# 2. From a first frame: input_reference as an uploaded file (every form value is text; numbers too).
with open(IMAGE, "rb") as f:
    body, ctype = multipart({"prompt": "The sun sets into the sea, a boat drifts by", "seconds": "8",
                             "steps": str(STEPS)},
                            {"input_reference": (os.path.basename(IMAGE), "image/png", f.read())})
status, data = call("POST", "/v1/videos", body, ctype)
b = json.loads(data)
check(status == 202 and b["request"]["first_image"]["filename"] == os.path.basename(IMAGE),
      "input_reference became the first keyframe (%d)" % status)

# 3. Follow them (GET /v1/videos/{id}/events streams the same objects: see events.py).
done = []
for job in (a, b):
    while True:
        v = api("GET", "/v1/videos/" + job["id"])
        if v["status"] in ("completed", "failed", "cancelled"):
            break
        print("  %s %s %s %.0f%%" % (v["id"], v["status"], v["phase"] or "", v["progress"]))
        time.sleep(0.5)
    done.append(v)

# 4. Download each video and its poster.
for v in done:
    check(v["status"] == "completed", "%s completed (%s)" % (v["id"], (v["error"] or {}).get("message", "no error")))
    status, mp4 = call("GET", "/v1/videos/%s/content" % v["id"])
    with open(os.path.join(OUT, v["id"] + ".mp4"), "wb") as f:
        f.write(mp4)
    check(status == 200 and len(mp4) == v["bytes"] and mp4[4:8] == b"ftyp", "%s.mp4 (%d bytes)" % (v["id"], len(mp4)))
    status, png = call("GET", "/v1/videos/%s/content?variant=thumbnail" % v["id"])
    with open(os.path.join(OUT, v["id"] + ".thumbnail.png"), "wb") as f:
        f.write(png)
    check(status == 200 and png[1:4] == b"PNG", "%s.thumbnail.png (%d bytes)" % (v["id"], len(png)))

# 5. List page by page: `after` = the page's last_id while has_more.
listed, after = [], None
while True:
    page = api("GET", "/v1/videos?limit=1&order=asc" + ("&after=" + after if after else ""))
    listed += [v["id"] for v in page["data"]]
    if not page["has_more"]:
        break
    after = page["last_id"]
check(all(v["id"] in listed for v in done), "both listed (%d videos, one per page)" % len(listed))

# 6. Errors: the status and {"error": {"message", "type", "param", "code"}}.
status, data = call("GET", "/v1/videos/video_000000000000000000000000")
err = json.loads(data)["error"]
check(status == 404 and err["type"] == "not_found_error", "an unknown id: %d %s" % (status, err["message"]))

# 7. Delete them.
for v in done:
    d = api("DELETE", "/v1/videos/" + v["id"])
    check(d["deleted"] is True, "%s deleted" % v["id"])
print("done")
