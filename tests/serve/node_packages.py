"""The npm packages the client tests use, installed once per build folder: `openai` at the version
examples/js/package.json pins (the official SDK the JavaScript example uses) and playwright-core (the page test
drives Debian's Chromium with it). Installed from the npm registry with npm's own client; when the registry
cannot be reached the caller skips loudly (exit 77)."""
import fcntl
import json
import os
import shutil
import subprocess
import sys

from serve_common import SKIP, log

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYWRIGHT = "1.61.0"  # the newest playwright-core that still runs on Node 18 (Debian 12's nodejs)
OFFLINE = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ECONNRESET", "ENETUNREACH", "network")


def openai_version():
    with open(os.path.join(ROOT, "examples", "js", "package.json")) as f:
        return json.load(f)["dependencies"]["openai"]


def node_major():
    try:
        out = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=30).stdout
        return int(out.strip().lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return 0


def ensure(dest):
    """Returns dest/node_modules with the packages in it, or exits 77 (loudly) when node, npm or the registry is
    missing."""
    if not shutil.which("node") or not shutil.which("npm"):
        log("SKIPPED LOUDLY: node or npm missing (apt-get install nodejs npm; scripts/setup-test.sh does)")
        sys.exit(SKIP)
    if node_major() < 18:
        log("SKIPPED LOUDLY: node %d is older than 18, which the OpenAI SDK needs" % node_major())
        sys.exit(SKIP)
    os.makedirs(dest, exist_ok=True)
    wanted = {"openai": openai_version(), "playwright-core": PLAYWRIGHT}
    with open(os.path.join(dest, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the client tests may run in parallel
        have = {}
        for name in wanted:
            try:
                with open(os.path.join(dest, "node_modules", name, "package.json")) as f:
                    have[name] = json.load(f)["version"]
            except (OSError, ValueError, KeyError):
                pass
        if have != wanted:
            specs = ["%s@%s" % kv for kv in wanted.items()]
            log("installing %s into %s (npm registry)" % (" ".join(specs), dest))
            r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--no-save", "--prefix", dest] + specs,
                               capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                text = r.stdout + r.stderr
                if any(k in text for k in OFFLINE):
                    log("SKIPPED LOUDLY: the npm registry cannot be reached, so the official SDK cannot be "
                        "installed:\n" + text[-1500:])
                    sys.exit(SKIP)
                raise AssertionError("npm install failed (status %d):\n%s" % (r.returncode, text[-3000:]))
    return os.path.join(dest, "node_modules")
