#!/usr/bin/env python3
"""The requests of the official Python SDK (`pip install openai`) on the wire, against a fake-runner server.

The SDK cannot be installed here (no PyPI), so this test writes its requests byte for byte as openai-python 1.x/2.x
builds them, which differs from the JavaScript SDK (examples.js) in one way that matters: `videos.create` always
sends multipart/form-data (even without a file), its fields and `extra_body` flattened with bracket names
(`loras[][name]`) and then handed to httpx, which writes the text parts grouped by name (all `loras[][name]`, then
all `loras[][strength]`) and the files after them. The other calls are plain: `retrieve` GET /videos/{id},
`list` GET /videos?after=&limit=&order=, `download_content` GET /videos/{id}/content?variant=, `delete`.

    test_openai_python_wire.py H3"""
import json
import os
import tempfile

from serve_common import Server, check, log, main_wrapper, running
from test_serve_page import write_lora

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGE = os.path.join(ROOT, "examples", "first-frame.png")
HEADERS = {"User-Agent": "OpenAI/Python 2.8.0", "X-Stainless-Lang": "python", "X-Stainless-Package-Version": "2.8.0",
           "X-Stainless-Retry-Count": "0", "Authorization": "Bearer none"}


def flatten(key, value):
    """openai._qs with array_format="brackets": nested objects `k[m]`, lists `k[]`, True -> "true", None dropped."""
    if isinstance(value, dict):
        return [i for m, v in value.items() for i in flatten("%s[%s]" % (key, m), v)]
    if isinstance(value, (list, tuple)):
        return [i for v in value for i in flatten(key + "[]", v)]
    text = "true" if value is True else "false" if value is False else "" if value is None else str(value)
    return [(key, text)] if text else []


def sdk_form(body, files):
    """What the SDK's _serialize_multipartform and httpx's multipart encoder write: text parts grouped by name (a
    dict of name -> list, in the order names first appear), then the files."""
    grouped = {}
    for k, v in [i for key, value in body.items() for i in flatten(key, value)]:
        grouped.setdefault(k, []).append(v)
    boundary = os.urandom(16).hex()
    out = b""
    for name, values in grouped.items():
        for v in values:
            out += b'--%s\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n' % (
                boundary.encode(), name.encode(), v.encode())
    for name, (filename, data) in files.items():
        out += (b'--%s\r\nContent-Disposition: form-data; name="%s"; filename="%s"\r\nContent-Type: image/png\r\n\r\n'
                % (boundary.encode(), name.encode(), filename.encode())) + data + b"\r\n"
    return out + b"--%s--\r\n" % boundary.encode(), "multipart/form-data; boundary=" + boundary


def create(s, body, files=None):
    """client.videos.create(prompt=..., input_reference=..., seconds=..., size=..., extra_body={...})"""
    raw, ctype = sdk_form(body, files or {})
    st, _, p = s.request("POST", "/v1/videos", raw=raw,
                         headers=dict(HEADERS, **{"Content-Type": ctype, "Accept": "application/json"}))
    return st, json.loads(p)


def run(h3):
    loras = tempfile.mkdtemp(prefix="h3-pywire-loras-")
    for name in ("ink.safetensors", "dusk.safetensors"):
        write_lora(os.path.join(loras, name))
    server = Server(h3, ranks=1, args=["--runner", "fake", "--fake-step-ms", "10", "--fake-load-ms", "0",
                                       "--lora-dir", loras])
    with running(server.start(), loras) as s:
        # 1. Text only: multipart all the same (the SDK forces it), engine fields in extra_body, two LoRAs whose
        #    parts arrive grouped by name.
        st, a = create(s, {"prompt": "a lighthouse at dusk", "model": "minimax-h3", "seconds": "4",
                           "size": "720x1280", "steps": 4, "seed": 11,
                           "loras": [{"name": "ink.safetensors", "strength": 0.5},
                                     {"name": "dusk.safetensors", "strength": 1.25}]})
        check(st == 202, "create without a file: 202 (%s)" % a.get("error"))
        check(a["object"] == "video" and a["status"] == "queued", "a video object, queued")
        check(a["size"] == "736x1280" and a["seconds"] == "5.16667", "size and seconds mapped (%s, %s)" %
              (a["size"], a["seconds"]))
        check(a["request"]["steps"] == 4 and a["request"]["seed"] == 11, "extra_body's numbers arrived as numbers")
        check(a["request"]["loras"] == [{"name": "ink.safetensors", "strength": 0.5},
                                        {"name": "dusk.safetensors", "strength": 1.25}],
              "two LoRAs sent grouped by name are the two LoRAs asked for (%s)" % a["request"]["loras"])
        # 2. With input_reference (an open file: httpx sends its base name and a type guessed from it).
        with open(IMAGE, "rb") as f:
            st, b = create(s, {"prompt": "the sun sets into the sea", "seconds": "8", "steps": 4},
                           {"input_reference": ("first-frame.png", f.read())})
        check(st == 202 and b["request"]["first_image"]["filename"] == "first-frame.png",
              "input_reference is the first keyframe")
        # 3. retrieve until done, download_content (video, thumbnail), list, delete; errors as the SDK reads them.
        for job in (a, b):
            v = s.wait_job(job["id"])
            check(v["status"] == "completed", "%s completed" % job["id"])
            for variant, magic in (("video", b"ftyp"), ("thumbnail", b"PNG")):
                st, h, p = s.request("GET", "/v1/videos/%s/content?variant=%s" % (job["id"], variant),
                                     headers=dict(HEADERS, Accept="application/binary"))
                check(st == 200 and magic in p[:8],
                      "download_content(variant=%r): %d, %d bytes" % (variant, st, len(p)))
        st, _, p = s.request("GET", "/v1/videos?limit=1&order=asc", headers=HEADERS)
        page = json.loads(p)
        check(st == 200 and page["object"] == "list" and page["has_more"] and page["data"][0]["id"] == a["id"],
              "list(limit=1, order='asc'): the first page")
        st, _, p = s.request("GET", "/v1/videos?after=%s&limit=1&order=asc" % page["last_id"], headers=HEADERS)
        check(st == 200 and json.loads(p)["data"][0]["id"] == b["id"], "the next page (after=last_id)")
        st, _, p = s.request("GET", "/v1/videos/video_000000000000000000000000", headers=HEADERS)
        err = json.loads(p)["error"]
        check(st == 404 and {"message", "type", "param", "code"} <= set(err), "NotFoundError's body: %s" % err)
        for job in (a, b):
            st, _, p = s.request("DELETE", "/v1/videos/" + job["id"], headers=HEADERS)
            d = json.loads(p)
            check(st == 200 and d["deleted"] is True and d["id"] == job["id"], "delete %s" % job["id"])
        # 4. n = 3 through extra_body (numbers as form text), each video downloaded with extra_query={"index": k}.
        st, c = create(s, {"prompt": "three takes", "seconds": "4", "steps": 3, "seed": 50, "n": 3, "priority": 2})
        check(st == 202 and c["n"] == 3 and c["priority"] == 2 and [v["seed"] for v in c["videos"]] == [50, 51, 52],
              "extra_body={'n': 3, 'priority': 2} arrived as numbers: seeds 50, 51, 52")
        c = s.wait_job(c["id"])
        takes = set()
        for k in range(3):
            st, h, p = s.request("GET", "/v1/videos/%s/content?variant=video&index=%d" % (c["id"], k),
                                 headers=dict(HEADERS, Accept="application/binary"))
            check(st == 200 and p[4:8] == b"ftyp" and len(p) == c["videos"][k]["bytes"],
                  "download_content(variant='video', extra_query={'index': %d}): %d bytes" % (k, len(p)))
            takes.add(p)
        check(len(takes) == 3, "three different videos")
        s.request("DELETE", "/v1/videos/" + c["id"], headers=HEADERS)
        log("the Python SDK's requests, as it writes them, all answered")


if __name__ == "__main__":
    main_wrapper(run)
