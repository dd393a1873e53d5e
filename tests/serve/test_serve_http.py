#!/usr/bin/env python3
"""h3 serve's HTTP front under abuse (fake runner, 1 rank; docs/api.md "Limits" and "Security"):
  - /health answers within 1 s while 500 idle and slow (one header byte at a time) connections are open;
  - --max-body holds for chunked bodies; header count and size are limited;
  - Host check (DNS rebinding), cross-site Origin refused, non-JSON bodies refused, no CORS headers;
  - Range requests per RFC 9110 (416, several ranges ignored, no wrapped lengths);
  - a second server on the same port fails to bind; the API key from a file or the environment (not in ps).
usage: test_serve_http.py H3_BINARY"""
import http.client
import json
import os
import struct
import zlib
import socket
import subprocess
import tempfile
import threading
import time

from serve_common import Server, check, log, main_wrapper

GOOD = {"prompt": "a lighthouse at dusk", "seconds": 5, "steps": 3}


def raw(port, data, timeout=10, read=4096):
    """Sends raw bytes and returns what comes back before the server closes or `timeout`."""
    k = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        k.sendall(data)
        out = b""
        while len(out) < read:
            try:
                b = k.recv(read)
            except (socket.timeout, ConnectionResetError):
                break
            if not b:
                break
            out += b
        return out
    finally:
        k.close()


def status_of(resp):
    try:
        return int(resp.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


def health_latency(s, n=5):
    worst = 0.0
    for _ in range(n):
        t = time.time()
        st, _, _ = s.request("GET", "/health", timeout=10)
        worst = max(worst, time.time() - t)
        if st != 200:
            raise AssertionError("/health answered %s under load" % st)
        time.sleep(0.05)
    return worst


def abusive_clients(s, n_idle=250, n_slow=250, seconds=12):
    log("abuse: %d idle + %d slow connections" % (n_idle, n_slow))
    socks = []
    for i in range(n_idle + n_slow):
        k = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        if i >= n_idle:
            k.sendall(b"GET /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        socks.append(k)
    stop = threading.Event()

    def drip():  # slowloris: one more header byte per socket every second
        while not stop.is_set():
            for k in socks[n_idle:]:
                try:
                    k.sendall(b"X")
                except OSError:
                    pass
            stop.wait(1.0)

    t = threading.Thread(target=drip)
    t.start()
    try:
        time.sleep(1.0)
        lat = []
        t_end = time.time() + seconds
        while time.time() < t_end:
            lat.append(health_latency(s, 1))
            time.sleep(0.5)
        worst = max(lat)
        log("  /health latency under %d abusive connections: median %.1f ms, worst %.1f ms (%d probes)"
            % (len(socks), 1000 * sorted(lat)[len(lat) // 2], 1000 * worst, len(lat)))
        check(worst < 1.0, "/health answers within 1 s under %d idle/slow connections (worst %.3f s)"
              % (len(socks), worst))
        st, j = s.json("POST", "/v1/videos", GOOD)
        check(st == 202, "a job is still accepted under the same load")
    finally:
        stop.set()
        t.join()
        for k in socks:
            k.close()


def limits(s, max_body):
    log("limits: bodies and headers")
    # Chunked body past --max-body: 413 or a closed connection, never accepted.
    big = b"x" * 8192
    req = (b"POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n%s\r\n" % (len(big), big)
    n = max_body // len(big) + 4
    resp = raw(s.port, req + chunk * n + b"0\r\n\r\n")
    check(status_of(resp) in (413, None) and b"HTTP/1.1 2" not in resp,
          "a chunked body of %d bytes past --max-body %d: %s" % (n * len(big), max_body, resp[:40]))
    # Endless chunked body: the server stops reading (closes) instead of buffering it. The loopback's socket buffers
    # take several MiB before a send fails: 64 x --max-body (4 MiB) was once all accepted under CI's load, so the
    # client may send up to 256 x (16 MiB) before the test calls it buffered.
    k = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    k.sendall(req)
    sent, cap = 0, 256 * max_body
    try:
        while sent < cap:
            k.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass
    k.close()
    check(sent < cap, "an endless chunked body is cut off after %d bytes" % sent)
    # Declared length far past the limit: 413 before any body byte.
    far = 4 * max_body + (1 << 20) + 1
    resp = raw(s.port, b"POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n" % far)
    check(status_of(resp) == 413, "Content-Length far past --max-body: 413 at once")
    # Just past it: the body is read and dropped, then 413 (a client that sends before it reads gets the answer).
    resp = raw(s.port, b"POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n" % (max_body + 1) + b"x" * (max_body + 1))
    check(status_of(resp) == 413, "Content-Length just past --max-body, body sent: 413")
    st, _, _ = s.request("GET", "/health")
    check(st == 200, "the server is fine afterwards")


def answer(port, data, timeout=10):
    """Sends raw bytes; returns (status, headers as a lower-case dict, body) of the first answer, read by its
    Content-Length, and the seconds it took."""
    t = time.time()
    k = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    out = b""
    try:
        k.sendall(data)
        while b"\r\n\r\n" not in out:
            b = k.recv(65536)
            if not b:
                break
            out += b
        head, _, body = out.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        headers = {}
        for l in lines[1:]:
            name, _, value = l.partition(b":")
            headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        want = int(headers.get("content-length", "0") or 0)
        while len(body) < want:
            b = k.recv(65536)
            if not b:
                break
            body += b
    except (OSError, ValueError):
        return None, {}, out, time.time() - t
    finally:
        k.close()
    return status_of(out), headers, body[:want], time.time() - t


def head_and_framing(s):
    """Every request that parses as HTTP is answered with the API's JSON, whatever is wrong with its head or framing
    (docs/api.md "Errors"): a URL or head past 16384 bytes (up to 60 KB, where libmicrohttpd's own HTML began at
    ~28 KB), a space in the URL (no answer at all before), HTTP/1.1 without Host, a Transfer-Encoding that is not
    chunked (the client waited for the idle timeout) or that comes with a Content-Length. What libmicrohttpd still
    refuses itself (not HTTP: a head past what a connection holds, a broken request line, header line, version,
    Content-Length or chunk) keeps its status."""
    log("heads and framing: JSON refusals")
    host = b"Host: 127.0.0.1\r\n"

    def refused(data, status, what, code=None):
        st, h, body, took = answer(s.port, data)
        try:
            err = json.loads(body)["error"]
        except (ValueError, KeyError, TypeError):
            err = None
        ok = st == status and h.get("content-type") == "application/json" and err and err.get("message")
        if not ok or (code and err["code"] != code) or took > 5:
            raise AssertionError("%s: %s %s %r in %.1f s instead of %d with a JSON error" % (
                what, st, h.get("content-type"), body[:120], took, status))
        return err

    for n in (16385, 1 << 15, 60000):
        refused(b"GET /" + b"a" * n + b" HTTP/1.1\r\n" + host + b"\r\n", 414, "a URL of %d bytes" % n, "uri_too_long")
        refused(b"GET /v1/videos?after=" + b"a" * n + b" HTTP/1.1\r\n" + host + b"\r\n", 414,
                "a query of %d bytes" % n)
        refused(b"GET /health HTTP/1.1\r\n" + host + b"X-Big: " + b"a" * n + b"\r\n\r\n", 431,
                "a header of %d bytes" % n, "headers_too_large")
    for n in (65, 200, 700):
        refused(b"GET /health HTTP/1.1\r\n" + host + b"".join(b"X-H%d: v\r\n" % i for i in range(n)) + b"\r\n",
                431, "%d header fields" % n, "headers_too_large")
    check(True, "URLs, queries and headers of 16 to 60 KB, 65 to 700 fields: 414 / 431 with the API's JSON")
    for target in (b"/v1/vid eos", b"/health?a=b c", b"/health\x01", b"/health\x7f"):
        refused(b"GET " + target + b" HTTP/1.1\r\n" + host + b"\r\n", 400, "the URL %r" % target, "bad_request")
    refused(b"GET /health HTTP/1.1\r\n\r\n", 400, "HTTP/1.1 without Host", "bad_request")
    st, _, body, _ = answer(s.port, b"GET /health HTTP/1.0\r\n\r\n")
    check(st == 200, "HTTP/1.0 without Host is served (%s)" % st)
    post = b"POST /v1/videos HTTP/1.1\r\n" + host + b"Content-Type: application/json\r\n"
    for te in (b"gzip", b"gzip, chunked", b"identity"):
        refused(post + b"Transfer-Encoding: " + te + b"\r\n\r\n{}", 501, "Transfer-Encoding %s" % te.decode(),
                "not_implemented")
    refused(post + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 400,
            "Transfer-Encoding with Content-Length")
    refused(post + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
            "two Transfer-Encoding fields")
    check(True, "a space or control byte in the URL, HTTP/1.1 without Host, a coding that is not chunked or comes "
                "with Content-Length: 400 / 501 with the API's JSON, at once")
    # libmicrohttpd's own refusals (docs/api.md lists them): not HTTP, so no API answer; the status stays right.
    for data, status, what in [
            (b"GET /health HTTP/2.0\r\n" + host + b"\r\n", 505, "HTTP/2.0 in the request line"),
            (b"GET /health HTTX/1.1\r\n" + host + b"\r\n", 400, "a version that is no HTTP version"),
            (b"GET /health HTTP/1.1\r\n" + host + b"no colon here\r\n\r\n", 400, "a header line without a colon"),
            (b"GET /health HTTP/1.1\r\n" + host + b"X-Big: " + b"a" * (1 << 18) + b"\r\n\r\n", 431,
             "256 KiB of headers"),
            (post + b"Content-Length: 12a\r\n\r\n", 400, "a Content-Length that is no number"),
            (post + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "a chunk size that is no number")]:
        st, _, _, took = answer(s.port, data)
        check(st == status and took < 5, "%s: %s from libmicrohttpd (%.1f s)" % (what, st, took))
    st, _, _ = s.request("GET", "/health")
    check(st == 200, "the server is fine afterwards")


def security(s):
    log("security: Host, Origin, content types, CORS")
    for host in ["evil.example:%d" % s.port, "localhost.evil.example", "127.0.0.1.nip.io"]:
        st, h, p = s.request("GET", "/v1/videos", headers={"Host": host})
        check(st == 421 and b"host_not_allowed" in p, "Host %s: 421" % host)
        st, h, p = s.request("POST", "/v1/videos", GOOD, headers={"Host": host})
        check(st == 421, "POST with Host %s: 421" % host)
    for host in ["localhost:%d" % s.port, "127.0.0.1:%d" % s.port, "[::1]:%d" % s.port]:
        st, _, _ = s.request("GET", "/v1/videos", headers={"Host": host})
        check(st == 200, "Host %s is served" % host)
    base = "http://127.0.0.1:%d" % s.port
    for origin in ["https://evil.example", "null", "http://127.0.0.1:1"]:
        st, h, p = s.request("POST", "/v1/videos", GOOD, headers={"Origin": origin})
        check(st == 403 and b"cross_origin" in p, "POST from Origin %s: 403" % origin)
    st, h, p = s.request("POST", "/v1/videos", GOOD, headers={"Sec-Fetch-Site": "cross-site"})
    check(st == 403, "POST with Sec-Fetch-Site: cross-site: 403")
    st, h, p = s.request("POST", "/v1/videos", GOOD, headers={"Origin": base})
    check(st == 202, "POST from the server's own origin (its page) is accepted")
    jid = json.loads(p)["id"]
    st, _, _ = s.request("DELETE", "/v1/videos/" + jid, headers={"Origin": "https://evil.example"})
    check(st == 403, "DELETE from another origin: 403")
    body = json.dumps(GOOD).encode()
    for ctype in ["text/plain", "application/x-www-form-urlencoded", None]:
        h = {"Content-Type": ctype} if ctype else {"Content-Type": ""}
        st, _, p = s.request("POST", "/v1/videos", raw=body, headers=h)
        check(st == 415, "POST with Content-Type %r: 415" % ctype)
    # multipart/form-data is the OpenAI SDKs' encoding: taken (a JSON body under that type is a malformed form),
    # and refused from another origin like any state-changing request.
    st, _, p = s.request("POST", "/v1/videos", raw=body, headers={"Content-Type": "multipart/form-data; boundary=x"})
    check(st == 400 and b"multipart/form-data body" in p,
          "a JSON body sent as multipart/form-data: 400 naming the form")
    form = (b'--x\r\nContent-Disposition: form-data; name="prompt"\r\n\r\na form\r\n'
            b'--x\r\nContent-Disposition: form-data; name="steps"\r\n\r\n2\r\n--x--\r\n')
    st, _, p = s.request("POST", "/v1/videos", raw=form, headers={"Content-Type": "multipart/form-data; boundary=x",
                                                                   "Origin": "https://evil.example"})
    check(st == 403, "a multipart form from another origin: 403")
    st, _, p = s.request("POST", "/v1/videos", raw=form, headers={"Content-Type": "multipart/form-data; boundary=x"})
    check(st == 202 and json.loads(p)["parameters"]["steps"] == 2, "a multipart form is a job")
    st, _, _ = s.request("POST", "/v1/videos", raw=body, headers={"Content-Type": "application/json; charset=utf-8"})
    check(st == 202, "application/json with a charset is accepted")
    for method, path, extra in [("OPTIONS", "/v1/videos", {"Origin": "https://evil.example",
                                                           "Access-Control-Request-Method": "POST"}),
                                ("GET", "/v1/videos", {"Origin": "https://evil.example"}),
                                ("GET", "/health", {"Origin": "https://evil.example"})]:
        st, h, p = s.request(method, path, headers=extra)
        lower = {k.lower(): v for k, v in h.items()}
        check(not any(k.startswith("access-control-") for k in lower),
              "%s %s with a foreign Origin: no CORS header (%d)" % (method, path, st))
        if method == "GET":
            check(lower.get("cross-origin-resource-policy") == "same-origin", "CORP same-origin on %s" % path)


def ranges(s):
    log("ranges (RFC 9110)")
    st, j = s.json("POST", "/v1/videos", dict(GOOD, steps=2))
    jid = j["id"]
    j = s.wait_job(jid, timeout=60)
    check(j["status"] == "completed", "a job completes")
    st, h, full = s.request("GET", "/v1/videos/%s/content" % jid)
    n = len(full)
    check(st == 200 and n == j["bytes"], "whole file: %d bytes" % n)
    cases = [("bytes=4-7", 206, full[4:8], "bytes 4-7/%d" % n), ("bytes=-4", 206, full[-4:], None),
             ("bytes=%d-" % (n - 2), 206, full[-2:], None), ("bytes=0-99999999", 206, full, None),
             ("bytes=%d-" % n, 416, None, "bytes */%d" % n), ("bytes=-0", 416, None, None),
             ("bytes=18446744073709551617-", 416, None, None), ("bytes=0-18446744073709551617", 206, full, None),
             ("bytes=0-1,4-5", 200, full, None), ("bytes=7-4", 200, full, None), ("lines=1-2", 200, full, None),
             ("bytes=%d-,%d-" % (n, n + 5), 416, None, None)]
    for rng, want, body, crange in cases:
        st, h, p = s.request("GET", "/v1/videos/%s/content" % jid, headers={"Range": rng})
        ok = st == want and (body is None or p == body) and (crange is None or h.get("Content-Range") == crange)
        if want == 416:
            ok = ok and h.get("Content-Range") == "bytes */%d" % n and "error" in json.loads(p)
        check(ok, "Range %s -> %d (got %d, %d bytes, Content-Range %s)" % (rng, want, st, len(p),
                                                                           h.get("Content-Range")))
    return jid


def second_server(h3, s):
    log("a second server on the same port")
    store = tempfile.mkdtemp(prefix="h3serve-test2-")
    p = subprocess.run([h3, "serve", "--store", store, "--port", str(s.port), "--runner", "fake"],
                       capture_output=True, timeout=60)
    err = p.stderr.decode(errors="replace")
    check(p.returncode != 0 and "cannot listen" in err and "port 0" not in err and "in use" in err,
          "the second server fails to bind, saying the port is in use: %s" % err.strip()[-160:])
    st, _, _ = s.request("GET", "/health")
    check(st == 200, "the first server still answers")


def refused_with_body(s, method, path, body, headers, status, times, what):
    """A client that writes its whole body before it reads (Python's http.client, as the OpenAI SDKs do) gets the
    refusal's status and JSON body every time, never a reset connection or a broken pipe."""
    for i in range(times):
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        try:
            c.request(method, path, body=body, headers=headers)
            r = c.getresponse()
            payload = r.read()
        except OSError as e:
            raise AssertionError("%s, try %d: the connection failed instead of %d: %r" % (what, i + 1, status, e))
        finally:
            c.close()
        try:
            message = json.loads(payload)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = None
        if r.status != status or not message:
            raise AssertionError("%s, try %d: %d %r instead of %d with a JSON error" % (what, i + 1, r.status,
                                                                                       payload[:200], status))
    check(True, "%s: %d with its JSON error, %d of %d times" % (what, status, times, times))


def refusals_reach_clients(s, max_body):
    log("refusals decided before the body reach a client that sends the body first")
    big = b"x" * (1 << 20)  # past --max-body, within the bound of what is read and dropped
    js = {"Content-Type": "application/json"}
    refused_with_body(s, "POST", "/v1/videos", big, js, 413, 20, "1 MiB past --max-body %d" % max_body)
    refused_with_body(s, "POST", "/v1/videos/video_x/edit", big, js, 404, 20, "an unknown route with 1 MiB")
    refused_with_body(s, "PUT", "/v1/videos", big, js, 405, 20, "a method not allowed with 1 MiB")
    refused_with_body(s, "POST", "/v1/videos", big, {"Content-Type": "text/plain"}, 415, 20,
                      "a media type not taken with 1 MiB")
    # Two Content-Length fields that differ: 400 (which body is meant cannot be known).
    resp = raw(s.port, b"POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}")
    check(status_of(resp) == 400 and b"two different Content-Length" in resp,
          "two different Content-Length fields: 400 (%r)" % resp[:40])


def photo(size):
    """A PNG of about `size` bytes that does not compress (noise), as a phone photo is."""
    w = int((size / 3) ** 0.5)
    rows = b"".join(b"\0" + os.urandom(3 * w) for _ in range(w))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, w, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows, 1)) + chunk(b"IEND", b""))


def multipart(fields, files):
    boundary = "h3test" + os.urandom(8).hex()
    out = b""
    for k, v in fields.items():
        out += b"--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n" % (
            boundary.encode(), k.encode(), v.encode())
    for k, (name, data) in files.items():
        out += (b"--%s\r\nContent-Disposition: form-data; name=\"%s\"; filename=\"%s\"\r\n"
                b"Content-Type: application/octet-stream\r\n\r\n" % (boundary.encode(), k.encode(), name.encode()))
        out += data + b"\r\n"
    return out + b"--%s--\r\n" % boundary.encode(), "multipart/form-data; boundary=" + boundary


def default_body_limit(s):
    """At the default --max-body: a 5 MB photo as the SDK sends it is taken; with a wrong key it is refused with
    401, and a body past the limit with 413, each read by the client."""
    log("the default body limit: a 5 MB photo, a wrong key, a body past 64 MiB")
    body, ctype = multipart({"prompt": "the same street at night", "seconds": "5", "steps": "2"},
                            {"input_reference": ("photo.png", photo(5 << 20))})
    st, h, p = s.request("POST", "/v1/videos", raw=body, headers={"Content-Type": ctype}, timeout=120)
    check(st == 202, "a %.1f MB photo as input_reference on a default server: %d %r" % (len(body) / 1e6, st, p[:200]))
    refused_with_body(s, "POST", "/v1/videos", body, {"Content-Type": ctype, "Authorization": "Bearer wrong"}, 401,
                      20, "a 5 MB upload with a wrong key")
    st, m = s.json("GET", "/v1/models")
    limit = m["data"][0]["max_body_bytes"]
    check(limit >= 64 << 20, "the default --max-body takes a few seconds of video: %d bytes" % limit)
    refused_with_body(s, "POST", "/v1/videos", b" " * (limit + 1), {"Content-Type": "application/json",
                      "Authorization": "Bearer " + s.api_key}, 413, 2, "a body one byte past the default limit")


def key_sources(h3):
    log("the API key from a file and from the environment")
    d = tempfile.mkdtemp(prefix="h3serve-key-")
    kf = os.path.join(d, "key")
    with open(kf, "w") as f:
        f.write("filekey123\n")
    s = Server(h3, args=["--runner", "fake", "--fake-load-ms", "0", "--api-key-file", kf]).start()
    try:
        s.api_key = "filekey123"
        st, _ = s.json("GET", "/v1/videos")
        check(st == 200, "the key read from --api-key-file is accepted")
        default_body_limit(s)
        st, _, _ = s.request("GET", "/v1/videos", headers={"Authorization": "Bearer wrong"})
        check(st == 401, "another key is refused")
        with open("/proc/%d/cmdline" % s.proc.pid, "rb") as f:
            check(b"filekey123" not in f.read(), "the key is not on the server's command line")
    finally:
        s.cleanup()
    s = Server(h3, args=["--runner", "fake", "--fake-load-ms", "0"], env={"H3_API_KEY": "envkey456"}).start()
    try:
        s.api_key = "envkey456"
        st, _ = s.json("GET", "/v1/videos")
        check(st == 200, "the key from H3_API_KEY is accepted")
        st, _, _ = s.request("GET", "/v1/videos", headers={"Authorization": "Bearer x"})
        check(st == 401, "and required")
    finally:
        s.cleanup()


def run(h3):
    max_body = 65536
    s = Server(h3, args=["--runner", "fake", "--fake-step-ms", "20", "--fake-load-ms", "0",
                         "--max-body", str(max_body)]).start()
    try:
        security(s)
        limits(s, max_body)
        head_and_framing(s)
        refusals_reach_clients(s, max_body)
        ranges(s)
        abusive_clients(s)
        second_server(h3, s)
        st, _, _ = s.request("GET", "/health")
        check(st == 200 and s.proc.poll() is None, "server alive after everything")
    except Exception:
        s.dump_log()
        raise
    finally:
        s.cleanup()
    key_sources(h3)


if __name__ == "__main__":
    main_wrapper(run)
