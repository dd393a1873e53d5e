#!/usr/bin/env python3
"""The examples of examples/ against a live `h3 serve` (fake runner): each must run to its end (it checks every
answer itself and exits non-zero at the first surprise), leave its downloads (videos and posters), and leave the
server with no job of its own (it deletes what it made, except events.py, whose job must be completed).
usage: test_examples.py H3_BINARY js|python|events|curl NODE_DIR"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

import node_packages
from serve_common import SKIP, Server, running, check, log, main_wrapper

ROOT = node_packages.ROOT
EXAMPLES = os.path.join(ROOT, "examples")
IMAGE = os.path.join(EXAMPLES, "first-frame.png")


def command(kind, node_dir, work):
    if kind == "js":
        node_packages.ensure(node_dir)
        # ES modules resolve packages from the script's folder up: run an unmodified copy beside node_modules.
        script = os.path.join(node_dir, "videos.mjs")
        shutil.copyfile(os.path.join(EXAMPLES, "js", "videos.mjs"), script)
        return ["node", script, IMAGE]
    if kind == "python":
        return [sys.executable, os.path.join(EXAMPLES, "python", "videos.py"), IMAGE]
    if kind == "events":
        return [sys.executable, os.path.join(EXAMPLES, "python", "events.py"), "a kettle whistling on a stove"]
    if kind == "curl":
        for tool in ("curl", "jq"):
            if not shutil.which(tool):
                log("SKIPPED LOUDLY: %s missing (apt-get install %s; scripts/setup-test.sh does)" % (tool, tool))
                sys.exit(SKIP)
        return ["bash", os.path.join(EXAMPLES, "curl.sh"), IMAGE]
    raise SystemExit("unknown example kind " + kind)


def run(h3):
    kind, node_dir = sys.argv[2], os.path.abspath(sys.argv[3])
    work = tempfile.mkdtemp(prefix="h3-example-%s-" % kind)
    server = Server(h3, ranks=1, args=["--runner", "fake", "--fake-step-ms", "20", "--fake-load-ms", "0"])
    with running(server.start(), work) as s:
        cmd = command(kind, node_dir, work)
        env = dict(os.environ, H3_URL="http://127.0.0.1:%d" % s.port, H3_OUT=work, H3_STEPS="6")
        log("running:", " ".join(cmd))
        r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=300)
        log("  " + (r.stdout + r.stderr).strip().replace("\n", "\n  "))
        check(r.returncode == 0, "examples/%s ran to its end" % kind)
        st, l = s.json("GET", "/v1/videos?limit=100")
        if kind == "events":
            check([j["status"] for j in l["data"]] == ["completed"], "its job completed")
        else:
            mp4s = glob.glob(os.path.join(work, "video_*.mp4"))
            pngs = glob.glob(os.path.join(work, "video_*.thumbnail.png"))
            want = 5 if kind == "js" else 2  # js: also the three videos of one request with n = 3
            check(len(mp4s) == want and len(pngs) == 2, "%d videos and two posters downloaded" % want)
            check(l["data"] == [], "the example deleted its jobs")


if __name__ == "__main__":
    main_wrapper(run)
