#!/usr/bin/env python3
"""What a phone sends, through the official SDKs, to a default server (fake runner, the default --max-body; issue 38):
videos.create with a 5 MB JPEG as input_reference is taken (202), and a body past --max-body is refused with 413 and
the server's JSON error, read by the client 20 of 20 times (before, the SDKs saw a connection error: the server
closed on a client still writing its body).

  js      the official JavaScript SDK (npm `openai`, the version examples/js pins), unmodified, retries off
          (sdk_uploads.mjs); skipped loudly when the npm registry cannot be reached
  python  the official Python SDK's requests as it writes them (it cannot be installed here, no PyPI): httpx's
          multipart body written whole before the answer is read, then the error body read as the SDK reads it

usage: test_sdk_uploads.py H3 js|python NODE_DIR"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile

import node_packages
from jpeg_noise import jpeg_noise
from serve_common import Server, check, log, main_wrapper, running
from test_openai_python_wire import HEADERS

TIMES = 20
HERE = os.path.dirname(os.path.abspath(__file__))


def python_sdk_create(port, prompt, filename, data):
    """client.videos.create(prompt=..., input_reference=open(filename, "rb")) as httpx sends it: the whole
    multipart body, then the answer. Returns (status, JSON body) or raises OSError as httpx would."""
    boundary = os.urandom(16).hex().encode()
    body = (b'--%s\r\nContent-Disposition: form-data; name="prompt"\r\n\r\n%s\r\n' % (boundary, prompt.encode()) +
            b'--%s\r\nContent-Disposition: form-data; name="input_reference"; filename="%s"\r\n'
            b'Content-Type: image/jpeg\r\n\r\n' % (boundary, filename.encode()) + data + b"\r\n--%s--\r\n" % boundary)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        c.request("POST", "/v1/videos", body=body, headers=dict(
            HEADERS, **{"Content-Type": "multipart/form-data; boundary=" + boundary.decode(),
                        "Accept": "application/json"}))
        r = c.getresponse()
        return r.status, json.loads(r.read())
    finally:
        c.close()


def run_python(s, photo):
    st, v = python_sdk_create(s.port, "the same street at night", "photo.jpg", photo)
    check(st == 202 and v["request"]["first_image"]["filename"] == "photo.jpg",
          "a %.1f MB JPEG as input_reference: %d (%s)" % (len(photo) / 1e6, st, v.get("error")))
    limit = s.json("GET", "/v1/models")[1]["data"][0]["max_body_bytes"]
    big = b"\xff" * (limit + 1)
    counts = {"413": 0, "connection error": 0, "other": []}
    for _ in range(TIMES):
        try:
            st, e = python_sdk_create(s.port, "too large", "big.jpg", big)
            if st == 413 and e["error"]["code"] == "too_large":
                counts["413"] += 1
            else:
                counts["other"].append("%d %s" % (st, e))
        except OSError as e:  # httpx raises APIConnectionError for these
            counts["connection error"] += 1
    check(counts["413"] == TIMES, "a body past --max-body %d: 413 with the JSON error %d of %d times %s" % (
        limit, counts["413"], TIMES, counts))


def run_js(s, photo, node_dir):
    node_packages.ensure(node_dir)
    script = os.path.join(node_dir, "sdk_uploads.mjs")  # ES modules find packages from the script's folder up
    shutil.copyfile(os.path.join(HERE, "sdk_uploads.mjs"), script)
    work = tempfile.mkdtemp(prefix="h3-sdk-uploads-")
    try:
        jpeg = os.path.join(work, "photo.jpg")
        with open(jpeg, "wb") as f:
            f.write(photo)
        r = subprocess.run(["node", script, jpeg, str(TIMES)], env=dict(os.environ, H3_URL="http://127.0.0.1:%d" %
                                                                         s.port),
                           capture_output=True, text=True, timeout=600)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log("  " + (r.stdout + r.stderr).strip().replace("\n", "\n  "))
    check(r.returncode == 0, "the SDK script ran to its end")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    c = out["created"]
    check(c["status"] in ("queued", "in_progress") and c["first_image"] == "photo.jpg",
          "videos.create with a %.1f MB JPEG as input_reference: %s" % (out["photo_bytes"] / 1e6, c))
    o = out["over_limit"]
    check(o["status_413"] == TIMES and o["connection_error"] == 0 and not o["other"],
          "a body past --max-body %d: APIError 413 %d of %d times, APIConnectionError %d, other %s" % (
              out["limit"], o["status_413"], TIMES, o["connection_error"], o["other"]))


def run(h3):
    kind, node_dir = sys.argv[2], os.path.abspath(sys.argv[3]) if len(sys.argv) > 3 else ""
    photo = jpeg_noise(5 << 20)
    # A default server: no --max-body (64 MiB), as a user starts it.
    server = Server(h3, ranks=1, args=["--runner", "fake", "--fake-step-ms", "20", "--fake-load-ms", "0"])
    with running(server.start()) as s:
        if kind == "js":
            run_js(s, photo, node_dir)
        elif kind == "python":
            run_python(s, photo)
        else:
            raise SystemExit("unknown kind " + kind)


if __name__ == "__main__":
    main_wrapper(run)
