"""Helpers for the `h3 serve` tests: start/stop a server on a free port, JSON over HTTP, SSE reading.
Standard library only."""
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

SKIP = 77  # CTest SKIP_RETURN_CODE


def log(*a):
    print(*a, flush=True)


def listening_port(stdout, deadline):
    """The port `h3 serve` announces on its "listening on http://host:port/" line, read from its stdout until the
    deadline (None when the output ends or the deadline passes first), and the last line read."""
    line = b""
    while time.time() < deadline:
        line = stdout.readline()
        if not line:
            break
        m = re.search(rb"listening on http://[^:]+:(\d+)/", line)
        if m:
            return int(m.group(1)), line
    return None, line


def http_request(port, method, path, data=None, headers=None, timeout=30):
    """One request to 127.0.0.1:port on a connection of its own (a body is sent as JSON unless `headers` give its
    Content-Type): status, headers, payload."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = dict(headers or {})
    if data is not None:
        h.setdefault("Content-Type", "application/json")
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    payload = r.read()
    c.close()
    return r.status, dict(r.getheaders()), payload


class Server:
    def __init__(self, h3, store=None, ranks=1, args=(), env=None, timeout=20, global_args=()):
        self.h3 = h3
        self.global_args = list(global_args)  # before the command, e.g. ["--device", "cuda"]
        self.rank_timeout = timeout
        self.store = store or tempfile.mkdtemp(prefix="h3serve-test-")
        self.ranks = ranks
        self.args = list(args)
        self.env = dict(os.environ)
        self.env.pop("H3_RANKS", None)
        self.env.setdefault("H3_LOG_LEVEL", "info")
        if env:
            self.env.update(env)
        self.proc = None
        self.port = None
        self.api_key = None
        for i, a in enumerate(self.args):
            if a == "--api-key":
                self.api_key = self.args[i + 1]
        self.log_path = os.path.join(self.store, "server.log")

    def start(self, wait_ready=True, timeout=120):
        cmd = [self.h3, "--ranks", str(self.ranks), "--timeout", str(self.rank_timeout)] + self.global_args + [
            "serve", "--store", self.store, "--port", "0"] + self.args
        log("starting:", " ".join(cmd))
        self.logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.logf, env=self.env)
        self.port, line = listening_port(self.proc.stdout, time.time() + 30)
        if not self.port:
            self.dump_log()
            raise RuntimeError("server did not start: %r" % line)
        if wait_ready:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                st, _, _ = self.request("GET", "/health")
                if st == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                self.dump_log()
                raise RuntimeError("server exited with %s" % self.proc.returncode)
            time.sleep(0.2)
        self.dump_log()
        raise RuntimeError("server not ready after %s s" % timeout)

    def conn(self, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, raw=None, timeout=30):
        h = dict(headers or {})
        if self.api_key and "Authorization" not in h:
            h["Authorization"] = "Bearer " + self.api_key
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        return http_request(self.port, method, path, data, h, timeout)

    def json(self, method, path, body=None, **kw):
        st, h, p = self.request(method, path, body, **kw)
        try:
            return st, json.loads(p)
        except ValueError:
            return st, {"_raw": p[:200].decode("latin-1")}

    def wait_job(self, jid, statuses=("completed", "failed", "cancelled"), timeout=300):
        deadline = time.time() + timeout
        while time.time() < deadline:
            st, j = self.json("GET", "/v1/videos/" + jid)
            if st == 200 and j["status"] in statuses:
                return j
            time.sleep(0.1)
        raise RuntimeError("job %s not in %s after %s s: %s" % (jid, statuses, timeout, j))

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def stop(self):
        self.kill(signal.SIGTERM)

    def dump_log(self, tail=60):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            log("---- server log (last %d lines) ----" % tail)
            for l in lines[-tail:]:
                log("  " + l)
            logs = os.path.join(self.store, "logs")
            for name in sorted(os.listdir(logs))[-2:] if os.path.isdir(logs) else []:
                with open(os.path.join(logs, name), "rb") as f:
                    log("---- %s ----" % name)
                    for l in f.read().decode("utf-8", "replace").splitlines()[-25:]:
                        log("  " + l)
        except OSError as e:
            log("no log:", e)

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.store, ignore_errors=True)


@contextlib.contextmanager
def running(server, *remove):
    """The started `server` for a with-block: its log is printed when the block fails; afterwards it is stopped and
    its store removed, and so are the folders in `remove`."""
    try:
        yield server
    except Exception:
        server.dump_log()
        raise
    finally:
        server.cleanup()
        for d in remove:
            shutil.rmtree(d, ignore_errors=True)


def sse_events(server, path, until=None, timeout=60):
    """Reads an SSE stream; yields (event, data) until the server closes it, until(ev, data) is true, or timeout."""
    c = server.conn(timeout)
    h = {"Accept": "text/event-stream"}
    if server.api_key:
        h["Authorization"] = "Bearer " + server.api_key
    c.request("GET", path, headers=h)
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("SSE %s: HTTP %s %s" % (path, r.status, r.read()[:200]))
    ev, data = None, ""
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            line = r.fp.readline()
            if not line:
                return
            line = line.decode().rstrip("\r\n")
            if line == "":
                if data:
                    d = json.loads(data)
                    yield ev, d
                    if until and until(ev, d):
                        return
                ev, data = None, ""
            elif line.startswith("event: "):
                ev = line[7:]
            elif line.startswith("data: "):
                data += line[6:]
    finally:
        c.close()


def safetensors_tensors(path):
    """The tensors of a .safetensors file as {name: (dtype, shape, bytes)}, its metadata left out (a latents file's
    names the request's file paths, which differ between runs)."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    return {k: (v["dtype"], tuple(v["shape"]), data[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


def h3_generate(h3, work, name, req, extra=(), ranks=1, timeout=600):
    """`h3 --ranks RANKS generate --latents` of `req` (prompt, width, height, frames, steps, seed) into
    WORK/NAME.mp4 (H3_RANKS is not passed on). Returns the latents file, or None when it fails (its output logged)."""
    out = os.path.join(work, name + ".mp4")
    cmd = [h3, "--ranks", str(ranks), "--log-level", "warn", "generate", "--prompt", req["prompt"],
           "--width", str(req["width"]), "--height", str(req["height"]), "--frames", str(req["frames"]),
           "--steps", str(req["steps"]), "--seed", str(req["seed"]), "--latents", "-o", out] + list(extra)
    env = dict(os.environ)
    env.pop("H3_RANKS", None)
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, timeout=timeout, env=env)
    log("  h3 generate %s: status %d in %.0f s" % (name, r.returncode, time.time() - t))
    if r.returncode:
        log(r.stdout.decode("utf-8", "replace")[-2000:], r.stderr.decode("utf-8", "replace")[-2000:])
        return None
    return os.path.join(work, name + ".latents.safetensors")


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)
    log("  ok:", msg)


def submit_jobs(s, bodies):
    """POSTs each request body in turn to /v1/videos, checks that each is accepted (202), returns their job ids."""
    ids = []
    for i, body in enumerate(bodies):
        st, j = s.json("POST", "/v1/videos", body)
        check(st == 202, "job %d accepted (%s)" % (i, j.get("id", j)))
        ids.append(j["id"])
    return ids


def run_checks(fn, *args):
    """fn(*args), then PASS; a failed check() (an AssertionError) prints FAIL and exits 1."""
    try:
        fn(*args)
    except AssertionError as e:
        log("FAIL:", e)
        sys.exit(1)
    log("PASS")


def main_wrapper(fn):
    run_checks(fn, sys.argv[1])
