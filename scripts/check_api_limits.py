#!/usr/bin/env python3
"""Checks docs/api.md's numbers against what `h3 serve` enforces (issue 26: the limits "as they are enforced").

Three sources, each compared with the number the document states:
  - the code's constants (the C++ sources that define each limit: src/serve/http_policy.h, src/media/media_read.h,
    ...), read as text, so a constant changed without the document fails here;
  - `h3 serve --help` / `h3 --help`: every default and environment variable in the "Server options" table;
  - with --live, a server (fake runner, loopback, free port) probed at each documented boundary: the documented
    value is accepted and one more is refused (request body, header fields, header bytes, prompt, JSON nesting,
    picture side and pixel count, audio sample rates and channels), an idle connection is closed after the
    documented time and connections past --max-connections are refused (both with small values given on the
    command line, their defaults being checked against --help).
The live probes take the numbers from the document, never from the code.

Usage: check_api_limits.py --h3 build/bin/h3 [--root DIR] [--doc docs/api.md] [--live]; --self-test feeds it
documents with wrong numbers and requires it to fail on each. Exit 0 when every check passes, 1 otherwise (each
failure printed), 77 when this h3 has no `serve` command (SKIPPED LOUDLY).
"""
import argparse
import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "serve"))
from serve_common import http_request, listening_port  # noqa: E402

SKIP = 77


class Checker:
    def __init__(self):
        self.failures = []
        self.passed = 0

    def check(self, ok, what):
        if ok:
            self.passed += 1
            print("  ok:", what, flush=True)
        else:
            self.failures.append(what)
            print("  FAIL:", what, flush=True)


# ---- reading numbers -------------------------------------------------------------------------------------------

def doc_numbers(doc, pattern, what, c):
    """The integers captured by `pattern` in the document (None, recorded as a failure, when it is absent); a space
    in the pattern matches any run of white space (paragraphs wrap)."""
    m = re.search(pattern.replace(" ", r"\s+"), doc)
    c.check(m is not None, "docs/api.md states %s (/%s/)" % (what, pattern))
    return [int(g) for g in m.groups()] if m else None


def c_value(expr):
    """An integer constant expression as the sources write them: 8192 * 8192, 64u << 20, 3ull << 30, 4 * 3600."""
    e = re.sub(r"(\d+)(?:ull|ul|ll|u|l)\b", r"\1", expr.strip(), flags=re.I)
    if not re.fullmatch(r"[\d\s*+<()]+", e):
        raise ValueError("not a constant expression: " + expr)
    return int(eval(e, {"__builtins__": {}}))  # digits and * + << ( ) only


def code_number(root, path, pattern, c):
    with open(os.path.join(root, path)) as f:
        m = re.search(pattern, f.read())
    c.check(m is not None, "%s defines /%s/" % (path, pattern))
    return c_value(m.group(1)) if m else None


def policy(field, scale=1):
    """A source of CODE_CLAIMS for the HTTP layer's default `field` ("size_t max_body": its type and name), set in
    src/serve/http_policy.h."""
    return ("src/serve/http_policy.h", field + r" = ([^;]+);", scale)


# (what, the document's pattern, [(source file, pattern of the constant's expression, scale)] per captured number)
CODE_CLAIMS = [
    ("the request body limit (--max-body default)", r"\| request body \| `--max-body` \((\d+) bytes\)",
     [policy("size_t max_body")]),
    ("the bodies held together", r"\| bodies held by all requests together \| (\d+) MiB",
     [policy("size_t max_body_total", 1 << 20)]),
    ("header fields per request", r"\| header fields of one request \| (\d+) \|", [policy("size_t max_headers")]),
    ("header bytes per request", r"\| request line \+ headers \| (\d+) bytes", [policy("size_t max_header_bytes")]),
    ("open connections (--max-connections default)", r"\| open connections \| `--max-connections` \((\d+)\)",
     [policy("unsigned max_connections")]),
    ("the idle timeout (--http-idle-timeout default)", r"`--http-idle-timeout` \((\d+) s\)",
     [policy("unsigned idle_timeout_s")]),
    ("open event streams", r"\| event streams \| (\d+) open", [policy("unsigned max_streams")]),
    ("API requests waiting", r"\| API requests waiting for a thread \| (\d+) \|", [policy("size_t max_pending")]),
    ("job submission threads", r"job submissions on (\d+)[;)]", [policy("unsigned submit_threads")]),
    ("JSON nesting (requests; other JSON)", r"\| JSON nesting \| (\d+) levels \(any other JSON the engine reads: (\d+)\)",
     [("src/serve/http_routes.cpp", r"kMaxRequestDepth = ([^;]+);", 1),
      ("src/core/json_limits.h", r"kJsonMaxDepth = ([^;]+);", 1)]),
    ("the prompt limit", r"\| prompt \| (\d+) bytes",
     [("src/serve/supervisor_api.cpp", r"kMaxPrompt = ([^;]+);", 1)]),
    ("bytes per uploaded file", r"at most (\d+) MiB per decoded file",
     [("src/serve/uploads.h", r"kMaxUploadBytes = ([^;]+);", 1 << 20)]),
    ("the probe child's limits (wall s, CPU s, GiB)",
     r"with (\d+) s of wall time, (\d+) s of CPU time and (\d+) GiB of address space",
     [("src/serve/probe.h", r"double wall_s = ([^;]+);", 1), ("src/serve/probe.h", r"int cpu_s = ([^;]+);", 1),
      ("src/serve/probe.h", r"uint64_t memory_bytes = ([^;]+);", 1 << 30)]),
    ("picture size (a side; in all)", r"at most (\d+) pixels a side and (\d+) x (\d+) pixels in all",
     [("src/media/media_read.h", r"kMaxMediaSide = ([^;]+);", 1), ("src/media/media_read.h", r"kMaxMediaPixels = ([^;]+);", "sqrt"),
      ("src/media/media_read.h", r"kMaxMediaPixels = ([^;]+);", "sqrt")]),
    ("still pictures (floor; pixels per byte)", r"at most max\((\d+) x (\d+), (\d+) x its file size in bytes\)",
     [("src/media/media_read.h", r"kStillFloorPixels = ([^;]+);", "sqrt"),
      ("src/media/media_read.h", r"kStillFloorPixels = ([^;]+);", "sqrt"),
      ("src/media/media_read.h", r"kStillPixelsPerByte = ([^;]+);", 1)]),
    ("audio (rates; channels)", r"\| audio \| (\d+) \.\. (\d+) Hz, (\d+) \.\. (\d+) channels",
     [("src/media/media_read.h", r"kMinSampleRate = ([^,;]+)", 1), ("src/media/media_read.h", r"kMaxSampleRate = ([^,;]+)", 1),
      (None, None, 1), ("src/media/media_read.h", r"kMaxAudioChannels = ([^,;]+)", 1)]),
    ("durations", r"\| duration, timestamps \| at most (\d+) hours",
     [("src/media/media_read.h", r"kMaxMediaSeconds = ([^,;]+)", 3600)]),
    ("frame rates", r"\| frame rate \| at most (\d+) frames per second",
     [("src/media/media_read.h", r"kMaxFrameRate = ([^,;]+)", 1)]),
    ("a scan's frames (the longest request + 1; decoded at most)",
     r"longest request's frames \((\d+)\) and samples, and decodes at most (\d+) video frames",
     [("src/pipeline/request.h", r"max_frames = ([^;]+);", "plus1"),
      ("src/media/media_read.h", r"kMaxScanSourceFrames = ([^;]+);", 1)]),
]


def code_claims(root, doc, c):
    print("the code's constants", flush=True)
    for what, pattern, sources in CODE_CLAIMS:
        stated = doc_numbers(doc, pattern, what, c)
        if stated is None:
            continue
        for got, (path, cpat, scale) in zip(stated, sources):
            if path is None:
                c.check(got == 1, "%s: %d (fixed at 1)" % (what, got))
                continue
            v = code_number(root, path, cpat, c)
            if v is None:
                continue
            want = int(round(v ** 0.5)) if scale == "sqrt" else v + 1 if scale == "plus1" else v / scale
            c.check(want == got, "%s: docs/api.md says %d, %s has %s" % (what, got, path, want))


# ---- the options table against --help --------------------------------------------------------------------------

def help_options(text):
    """{option: (default or None, env or None)} from CLI11's help."""
    out = {}
    # An option's names as CLI11 lists them: "-m,--model-dir,--model TEXT" gives --model-dir and --model.
    for m in re.finditer(r"^\s+(?:-\w,)?(--[a-z0-9-]+(?:,--[a-z0-9-]+)*)([^\n]*)", text, re.M):
        rest = m.group(2)
        d = re.search(r"=(\S+)", rest.split("(Env:")[0])
        e = re.search(r"\(Env:(\w+)\)", rest)
        for name in m.group(1).split(","):
            out[name] = (d.group(1) if d else None, e.group(1) if e else None)
    return out


def options_table(h3, doc, c):
    print("the \"Server options\" table against h3 serve --help / h3 --help", flush=True)
    serve_help = subprocess.run([h3, "serve", "--help"], capture_output=True, text=True).stdout
    global_help = subprocess.run([h3, "--help"], capture_output=True, text=True).stdout
    opts = help_options(global_help)
    opts.update(help_options(serve_help))
    m = re.search(r"## Server options\n(.*?)\n## ", doc, re.S)
    c.check(m is not None, "docs/api.md has a \"Server options\" section")
    if not m:
        return
    rows = [l for l in m.group(1).splitlines() if l.startswith("| `--")]
    c.check(len(rows) >= 15, "the options table has its rows (%d)" % len(rows))
    compared = 0
    for row in rows:
        cells = [x.strip() for x in re.split(r"(?<!\\)\|", row.strip("|"))]
        first, default = cells[0], cells[1]
        names = re.findall(r"`(--[a-z0-9-]+)", first)
        envs = dict(re.findall(r"`(--[a-z0-9-]+)[^`]*`\s*\[`(\w+)`\]", first))
        defaults = [d.strip().strip("`") for d in default.split(",")]
        for i, name in enumerate(names):
            c.check(name in opts, "%s (docs/api.md) is an option of h3 serve or h3" % name)
            if name not in opts:
                continue
            hdef, henv = opts[name]
            if name in envs:
                c.check(envs[name] == henv, "%s reads %s (docs) / %s (--help)" % (name, envs[name], henv))
            if hdef is not None and len(defaults) == len(names) and re.fullmatch(r"[\w.:-]+", defaults[i]):
                compared += 1
                c.check(defaults[i] == hdef, "%s default: %s (docs) / %s (--help)" % (name, defaults[i], hdef))
    c.check(compared >= 10, "%d defaults compared with --help" % compared)


# ---- the live server --------------------------------------------------------------------------------------------

class Live:
    def __init__(self, h3, args):
        self.store = tempfile.mkdtemp(prefix="h3-api-limits-")
        env = dict(os.environ, H3_LOG_LEVEL="info")
        env.pop("H3_RANKS", None)
        self.log = open(os.path.join(self.store, "server.log"), "wb")
        self.p = subprocess.Popen([h3, "serve", "--store", os.path.join(self.store, "s"), "--port", "0", "--runner",
                                   "fake", "--fake-load-ms", "0", "--fake-step-ms", "5"] + args,
                                  stdout=subprocess.PIPE, stderr=self.log, env=env)
        deadline = time.time() + 60
        self.port, _ = listening_port(self.p.stdout, deadline)
        if self.port is None:
            self.stop()
            raise RuntimeError("h3 serve did not start (see its log)")
        while time.time() < deadline:
            try:
                if self.request("GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("h3 serve not ready")

    def request(self, method, path, body=None, headers=None):
        status, _, data = http_request(self.port, method, path, body, headers, timeout=60)
        try:
            return status, json.loads(data)
        except ValueError:
            return status, {}

    def raw(self, data, timeout=10):
        k = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            k.sendall(data)
            out = b""
            while b"\r\n" not in out:
                b = k.recv(4096)
                if not b:
                    break
                out += b
            return int(out.split(b" ", 2)[1]) if out.startswith(b"HTTP/") else None
        except (OSError, ValueError, IndexError):
            return None
        finally:
            k.close()

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
        self.log.close()
        shutil.rmtree(self.store, ignore_errors=True)


def message(answer):
    return (answer[1].get("error") or {}).get("message", "") if isinstance(answer[1], dict) else ""


def png(w, h):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    rows = zlib.compress(b"".join(b"\0" + bytes(3 * w) for _ in range(h)), 9)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", rows) + chunk(b"IEND", b""))


def wav(rate, channels, frames=400):
    pcm = bytes(2 * channels * frames)
    return (b"RIFF" + struct.pack("<I", 36 + len(pcm)) + b"WAVEfmt " +
            struct.pack("<IHHIIHH", 16, 1, channels, rate, rate * 2 * channels, 2 * channels, 16) + b"data" +
            struct.pack("<I", len(pcm)) + pcm)


GOOD = {"prompt": "a lighthouse at dusk", "seconds": 5, "steps": 2}


def live_defaults(h3, doc, c):
    """Limits at their defaults (no option given): the document's number passes, one more is refused."""
    print("live: a server at its defaults", flush=True)
    s = Live(h3, ["--max-queue", "1000"])
    try:
        nums = doc_numbers(doc, r"\| request body \| `--max-body` \((\d+) bytes\)", "the body limit", c)
        if nums:
            n = nums[0]
            body = json.dumps(GOOD).encode()
            at = body + b" " * (n - len(body))
            c.check(s.request("POST", "/v1/videos", at)[0] == 202, "a body of %d bytes is taken" % n)
            c.check(s.request("POST", "/v1/videos", at + b" ")[0] == 413, "a body of %d bytes is refused (413)" % (n + 1))
        nums = doc_numbers(doc, r"\| header fields of one request \| (\d+) \|", "the header field limit", c)
        if nums:
            n = nums[0]

            def fields(k):  # k header fields, Host included
                return (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
                        b"".join(b"X-F%d: v\r\n" % i for i in range(k - 1)) + b"\r\n")
            c.check(s.raw(fields(n)) == 200, "%d header fields are taken" % n)
            c.check(s.raw(fields(n + 1)) == 431, "%d header fields are refused (431)" % (n + 1))
        nums = doc_numbers(doc, r"\| request line \+ headers \| (\d+) bytes", "the header byte limit", c)
        if nums:
            n = nums[0]

            def sized(total):  # request line + headers + the empty line = `total` bytes
                head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: "
                return head + b"a" * (total - len(head) - 4) + b"\r\n\r\n"
            c.check(s.raw(sized(n)) == 200, "%d bytes of request line and headers are taken" % n)
            c.check(s.raw(sized(n + 1)) == 431, "%d bytes of request line and headers are refused (431)" % (n + 1))
        nums = doc_numbers(doc, r"\| prompt \| (\d+) bytes", "the prompt limit", c)
        if nums:
            n = nums[0]
            c.check(s.request("POST", "/v1/videos", json.dumps(dict(GOOD, prompt="p" * n)).encode())[0] == 202,
                    "a prompt of %d bytes is taken" % n)
            a = s.request("POST", "/v1/videos", json.dumps(dict(GOOD, prompt="p" * (n + 1))).encode())
            c.check(a[0] == 400 and "prompt" in message(a), "a prompt of %d bytes is refused (400: %s)" %
                    (n + 1, message(a)))
        nums = doc_numbers(doc, r"\| JSON nesting \| (\d+) levels", "the request nesting limit", c)
        if nums:
            n = nums[0]

            def nested(depth):  # the body object is level 1
                return ('{"prompt": "x", "x_nest": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}").encode()
            a, b = s.request("POST", "/v1/videos", nested(n)), s.request("POST", "/v1/videos", nested(n + 1))
            ca, cb = (a[1].get("error") or {}).get("code"), (b[1].get("error") or {}).get("code")
            c.check(ca != "invalid_json", "JSON nested %d levels parses (then: %s %s)" % (n, a[0], ca))
            c.check(b[0] == 400 and cb == "invalid_json" and "nest" in message(b),
                    "JSON nested %d levels is refused (400 %s: %s)" % (n + 1, cb, message(b)))
    finally:
        s.stop()
    # The media limits with a body limit large enough for the uploads that probe them (a 8192 x 8193 PNG is
    # ~270 kB of base64, over the default --max-body), so that the media rule, not the body limit, decides.
    s = Live(h3, ["--max-queue", "1000", "--max-body", "8000000"])
    try:
        media(s, doc, c)
    finally:
        s.stop()


def media(s, doc, c):
    def upload(kind, filename, data):
        body = dict(GOOD, references=[{"kind": kind, "filename": filename, "data": base64.b64encode(data).decode()}])
        return s.request("POST", "/v1/videos", json.dumps(body).encode())

    nums = doc_numbers(doc, r"at most (\d+) pixels a side and (\d+) x (\d+) pixels in all", "the picture limits", c)
    if nums:
        side, pw, ph = nums
        # A side at its limit in a 4:1 picture (the widest a request takes; 16384 x 4096 is also the pixel limit).
        for w, h, word, refused in [(side, side // 4, "a side", False), (side + 1, side // 4, "a side", True),
                                    (pw, ph, "in all", False), (pw, ph + 1, "in all", True)]:
            a = upload("image", "p.png", png(w, h))
            said = word in message(a)
            c.check(said == refused and a[0] == (400 if refused else 202), "a %dx%d picture is %s (%d: %s)" % (
                w, h, "refused" if refused else "read", a[0], message(a)[:120] or "accepted"))
    nums = doc_numbers(doc, r"\| audio \| (\d+) \.\. (\d+) Hz, (\d+) \.\. (\d+) channels", "the audio limits", c)
    if nums:
        lo, hi, _, chans = nums
        for rate, ch, word, refused in [(lo, 1, "Hz", False), (lo - 1, 1, "Hz", True), (hi, 1, "Hz", False),
                                        (hi + 1, 1, "Hz", True), (48000, chans, "channels", False),
                                        (48000, chans + 1, "channels", True)]:
            a = upload("audio", "a.wav", wav(rate, ch, frames=max(400, rate // 100)))
            said = word in message(a)
            c.check(said == refused and a[0] == (400 if refused else 202),
                    "audio at %d Hz, %d channels is %s (%d: %s)" % (
                rate, ch, "refused" if refused else "read", a[0], message(a)[:120] or "accepted"))


def live_connections(h3, c):
    """--http-idle-timeout and --max-connections do what the table says, with small values (defaults: --help)."""
    print("live: idle timeout and connection limit (small values given)", flush=True)
    s = Live(h3, ["--http-idle-timeout", "2"])
    try:
        k = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        t0 = time.time()
        closed = k.recv(1) == b""
        took = time.time() - t0
        k.close()
        c.check(closed and 1.5 <= took <= 5, "an idle connection is closed after --http-idle-timeout 2 (%.1f s)" % took)
    finally:
        s.stop()
    # A long idle timeout here: held connections must not be closed by it while the 17th waits for an answer.
    s = Live(h3, ["--http-idle-timeout", "60", "--max-connections", "16"])
    try:
        held = [socket.create_connection(("127.0.0.1", s.port), timeout=10) for _ in range(16)]
        time.sleep(0.3)
        c.check(s.raw(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", timeout=3) is None,
                "a 17th connection is not served with --max-connections 16 (it waits, unaccepted)")
        for k in held:
            k.close()
        time.sleep(0.3)
        c.check(s.request("GET", "/health")[0] == 200, "served again once the 16 are closed")
        with open("/proc/%d/limits" % s.p.pid) as f:
            soft = int(re.search(r"Max open files\s+(\d+)", f.read()).group(1))
        c.check(soft >= 16, "the open-file limit (%d) holds --max-connections" % soft)
    finally:
        s.stop()
    # The default --max-connections must fit the open-file limit the server gives itself.
    s = Live(h3, [])
    try:
        with open("/proc/%d/limits" % s.p.pid) as f:
            soft = int(re.search(r"Max open files\s+(\d+)", f.read()).group(1))
        c.check(soft >= 4096, "the server's open-file limit (%d) holds the default --max-connections" % soft)
    finally:
        s.stop()


def check_all(h3, root, doc_path, live):
    c = Checker()
    with open(doc_path) as f:
        doc = f.read()
    code_claims(root, doc, c)
    options_table(h3, doc, c)
    if live:
        live_defaults(h3, doc, c)
        live_connections(h3, c)
    return c


def self_test(h3, root):
    """Wrong numbers in a copy of the document must each be caught (static ones, and one only the server can)."""
    with open(os.path.join(root, "docs", "api.md")) as f:
        doc = f.read()
    edits = [
        ("| header fields of one request | 64 |", "| header fields of one request | 65 |", False),
        ("at most 16384 pixels a side", "at most 16000 pixels a side", False),
        ("| `--http-idle-timeout S` [`H3_HTTP_IDLE_TIMEOUT`] | 30 |", "| `--http-idle-timeout S` [`H3_HTTP_IDLE_TIMEOUT`] | 31 |", False),
        ("[`H3_MAX_QUEUE`]", "[`H3_QUEUE`]", False),
        ("| JSON nesting |", "| JSON depth |", False),
    ]
    bad = 0
    work = tempfile.mkdtemp(prefix="h3-api-limits-self-")
    try:
        for old, new, _ in edits:
            if old not in doc:
                print("SELF-TEST FAIL: the document no longer holds %r" % old)
                bad += 1
                continue
            p = os.path.join(work, "api.md")
            with open(p, "w") as f:
                f.write(doc.replace(old, new, 1))
            c = check_all(h3, root, p, False)
            print("self-test: %r -> %d failure(s)" % (new, len(c.failures)), flush=True)
            bad += not c.failures
        # The live probes alone (no comparison with the code): a wrong prompt limit must be refuted by the server.
        p = os.path.join(work, "api.md")
        with open(p, "w") as f:
            f.write(doc.replace("| prompt | 16384 bytes |", "| prompt | 16000 bytes |", 1))
        c = Checker()
        live_defaults(h3, open(p).read(), c)
        print("self-test: a prompt limit of 16000 against the live server -> %d failure(s)" % len(c.failures))
        bad += not c.failures
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("SELF-TEST %s" % ("PASS" if bad == 0 else "FAIL (%d wrong document(s) not caught)" % bad))
    return 0 if bad == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--h3", required=True)
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--doc", default=None)
    ap.add_argument("--live", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if subprocess.run([a.h3, "serve", "--help"], capture_output=True).returncode != 0:
        print("SKIPPED LOUDLY: %s has no serve command (built without libmicrohttpd/SQLite)" % a.h3)
        return SKIP
    if a.self_test:
        return self_test(a.h3, a.root)
    c = check_all(a.h3, a.root, a.doc or os.path.join(a.root, "docs", "api.md"), a.live)
    print("%d checks passed, %d failed" % (c.passed, len(c.failures)))
    for f in c.failures:
        print("FAIL:", f)
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
