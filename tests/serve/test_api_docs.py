#!/usr/bin/env python3
"""docs/api.md, README.md and examples/README.md against the binary, so that they cannot drift again:
  1. the server options table: every option exists in `h3 serve --help` (or `h3 --help` for the global ones),
     with the environment variable and the default the table gives, and every number the docs pass to an option
     lies in the range the binary accepts;
  2. every `h3 ...` command line in them uses only options its command has;
  3. every local URL uses `h3 serve`'s default port;
  4. the limits and mappings the docs state, probed on a live server (fake runner): prompt bytes, JSON nesting,
     list page sizes, references, uploads, LoRAs, the page's defaults and presets, the preview sizes, and each
     row of the OpenAI SDK table.
A sentence this test reads that is no longer in the docs is a failure too: reword the test with the docs.
usage: test_api_docs.py H3_BINARY"""
import json
import os
import re
import subprocess
import tempfile

from serve_common import Server, running, check, log, main_wrapper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = ["docs/api.md", "README.md", "examples/README.md"]


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def find(pattern, text, what):
    m = re.search(pattern, text, re.S)
    if not m:
        raise AssertionError("the docs no longer say %s (pattern %r): update the docs or this test" % (what, pattern))
    return m


class Help:
    """The options of one command as its --help prints them (CLI11: name, type, =default, range, Env)."""

    def __init__(self, h3, *cmd):
        r = subprocess.run([h3] + list(cmd) + ["--help"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        self.text = r.stdout
        self.opts = {}
        entry = None
        for line in self.text.splitlines():
            m = re.match(r"^\s{2}((?:-[\w-]+,)*-[\w-]+)(.*)$", line)
            if m:
                entry = {"rest": m.group(2)}
                for name in m.group(1).split(","):
                    self.opts[name] = entry
            elif entry is not None and line.startswith("    "):
                entry["rest"] += " " + line.strip()
            elif not line.strip() or not line.startswith(" "):
                entry = None
        names = re.findall(r"^\s{2}([a-z][\w-]*)\s", self.text.split("Subcommands:")[-1], re.M) \
            if "Subcommands:" in self.text else []
        self.commands = set(names)

    def has(self, name):
        return name in self.opts

    def default(self, name):
        m = re.search(r"=(\S+)", self.opts[name]["rest"].split("(Env:")[0])
        return m.group(1) if m else None

    def env(self, name):
        m = re.search(r"\(Env:(\w+)\)", self.opts[name]["rest"])
        return m.group(1) if m else None

    def range(self, name):
        m = re.search(r"in \[(-?[\d.]+) - (-?[\d.]+)\]", self.opts[name]["rest"])
        return (float(m.group(1)), float(m.group(2))) if m else None


def options_table(h3, serve, top):
    log("1. the server options table")
    api = read("docs/api.md")
    table = find(r"## Server options\n(.*?)\n## ", api, "the server options table").group(1)
    rows = [l for l in table.splitlines() if l.startswith("| `")]
    check(len(rows) >= 15, "%d option rows" % len(rows))
    for row in rows:
        cells = [c.strip() for c in row.replace("\\|", "/").strip("|").split("|")]
        names = re.findall(r"`(-{1,2}[a-z][\w-]*)", cells[0])
        glob = "(global)" in cells[0]
        for name in names:
            h = top if glob else serve
            check(h.has(name), "%s is an option of %s" % (name, "h3" if glob else "h3 serve"))
        env = re.search(r"\[`(H3_\w+)`\]", cells[0])
        if env:
            h = top if glob else serve
            check(h.env(names[0]) == env.group(1), "%s reads %s" % (names[0], env.group(1)))
        stated = re.fullmatch(r"`?([\w.:-]+)`?", cells[1])
        if stated and len(names) == 1:
            h = top if glob else serve
            if h.default(names[0]) is not None:
                check(h.default(names[0]) == stated.group(1),
                      "%s defaults to %s (help: %s)" % (names[0], stated.group(1), h.default(names[0])))


def command_lines(h3, top):
    log("2. command lines and option values in the docs")
    helps = {}
    pattern = re.compile(r"\bh3 ((?:--?[\w-]+(?: [\w.:/]+)? )*)(%s)(?![\w-])([^`\n]*)" % "|".join(sorted(top.commands)))
    for rel in DOCS:
        text = read(rel).replace("\\|", "|")
        for m in pattern.finditer(text):
            cmd = m.group(2)
            if cmd not in helps:
                helps[cmd] = Help(h3, cmd)
            for name in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", m.group(1) + " " + m.group(3)):
                ok = helps[cmd].has(name) or top.has(name)
                check(ok, "%s: `h3 %s ... %s` is an option of h3 %s" % (rel, cmd, name, cmd))
            for name, value in re.findall(r"(--[\w-]+)[ =](\d+)\b", m.group(0)):
                h = helps[cmd] if helps[cmd].has(name) else top
                rng = h.range(name) if h.has(name) else None
                if rng:
                    check(rng[0] <= float(value) <= rng[1], "%s: %s %s within [%g, %g]" % (rel, name, value, *rng))
        for name, value in re.findall(r"`(--max-body|--port|--max-queue|--http-threads) (\d+)`", text):
            rng = Help(h3, "serve").range(name)
            check(rng and rng[0] <= float(value) <= rng[1], "%s: `%s %s` within %s" % (rel, name, value, rng))


def cli_summary(h3):
    log("2b. the README's CLI habits against the binary")
    readme = read("README.md")
    flags = find(r"Short\s+flags:(.*?)\.\s", readme, "the short flags").group(1)
    gen = Help(h3, "generate")
    shorts = re.findall(r"`(-[a-zA-Z])`", flags)
    check(len(shorts) >= 6, "%d short flags named" % len(shorts))
    for f in shorts:
        check(gen.has(f), "README: short flag %s is an option of h3 generate" % f)
    parts = find(r"`h3 --version` what was compiled in \((.*?)\)", readme, "what --version says").group(1)
    r = subprocess.run([h3, "--version"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "h3 --version exits 0")
    for part in [p.strip() for p in parts.split(",")]:
        word = {"git revision": "(git ", "CUDA architectures": "CUDA: "}.get(part, part)
        check(word in r.stdout, "README: h3 --version names %s" % part)


def ports(serve):
    log("3. local URLs use the default port")
    port = serve.default("--port")
    for rel in DOCS:
        for p in re.findall(r"(?:localhost|127\.0\.0\.1):(\d+)", read(rel)):
            check(p == port, "%s: port %s is h3 serve's default %s" % (rel, p, port))


def probes(h3):
    log("4. limits and mappings, probed on a live server")
    api = read("docs/api.md")
    loras = tempfile.mkdtemp(prefix="h3-docs-loras-")
    server = Server(h3, ranks=1, args=["--runner", "fake", "--fake-step-ms", "0", "--fake-load-ms", "0",
                                       "--lora-dir", loras, "--max-queue", "1000"])
    with running(server.start(), loras) as s:
        st, models = s.json("GET", "/v1/models")
        m = models["data"][0]
        n = int(find(r"`prompt` \| string \| required \| non-empty, at most (\d+) bytes", api, "the prompt limit").group(1))
        st, _ = s.json("POST", "/v1/videos", {"prompt": "a" * n, "steps": 2})
        st2, e = s.json("POST", "/v1/videos", {"prompt": "a" * (n + 1), "steps": 2})
        check(st == 202 and st2 == 400, "prompts of %d bytes pass, %d are refused" % (n, n + 1))
        depth = int(find(r"\| JSON nesting \| (\d+) levels", api, "the nesting limit").group(1))
        nest = lambda d: '{"prompt": "a", "x": ' + "[" * (d - 1) + "]" * (d - 1) + "}"
        st, e = s.json("POST", "/v1/videos", raw=nest(depth + 1).encode())
        check(st == 400 and e["error"]["code"] == "invalid_json", "nesting %d is refused as JSON" % (depth + 1))
        st, e = s.json("POST", "/v1/videos", raw=nest(depth).encode())
        check(st == 400 and e["error"]["code"] != "invalid_json", "nesting %d is parsed" % depth)
        lo, hi, dflt = map(int, find(r"`limit` (\d+) \.\. (\d+) \(default (\d+)\)", api, "the list limits").groups())
        for i in range(dflt + 1):
            s.json("POST", "/v1/videos", {"prompt": "page %d" % i, "steps": 2})
        st, l = s.json("GET", "/v1/videos")
        check(st == 200 and len(l["data"]) == dflt and l["has_more"], "a page holds %d jobs by default" % dflt)
        check(s.json("GET", "/v1/videos?limit=%d" % hi)[0] == 200 and s.json("GET", "/v1/videos?limit=%d" % (hi + 1))[0]
              == 400 and s.json("GET", "/v1/videos?limit=%d" % (lo - 1))[0] == 400, "limit %d .. %d" % (lo, hi))
        refs = int(find(r"`references` \|.*?at most (\d+) \(\d+ are read", api, "the reference limit").group(1))
        check(m["limits"]["max_references"] == refs, "at most %d references" % refs)
        mib = int(find(r"at most (\d+) MiB per file", api, "the upload limit").group(1))
        check(m["max_upload_bytes"] == mib << 20, "uploads of at most %d MiB" % mib)
        nl = int(find(r"`loras` \|.*?at most (\d+)\.", api, "the LoRA limit").group(1))
        st, e = s.json("POST", "/v1/videos", {"prompt": "a", "loras": [{"name": "x.safetensors"}] * (nl + 1)})
        check(st == 400 and ("at most %d" % nl) in e["error"]["message"], "at most %d LoRAs" % nl)
        size, secs, steps = find(r"defaults \{size, seconds, steps\}.*?`(\d+x\d+)`, (\d+) s, (\d+) steps on a CPU", api,
                                 "the page's CPU defaults").groups()
        check(m["defaults"] == {"size": size, "seconds": int(secs), "steps": int(steps)}, "the page's CPU defaults")
        names = find(r"presets \[\{name, steps\}\] \((\w+) (\d+), (\w+) (\d+), (\w+) (\d+)\)", api, "the presets").groups()
        check(m["presets"] == [{"name": names[i], "steps": int(names[i + 1])} for i in (0, 2, 4)], "the presets")
        previews = read("src/serve/previews.h")
        thumb = find(r"a PNG\s+at\s+most\s+(\d+)\s+pixels\s+wide", api, "the thumbnail width").group(1)
        tiles, tile_w, cols = find(r"up\s+to\s+(\d+)\)\s+as\s+(\d+)-pixel\s+tiles\s+in\s+rows\s+of\s+(\d+)", api,
                                   "the sprite sheet").groups()
        for name, value in (("kThumbnailWidth", thumb), ("kTileWidth", tile_w), ("kSheetColumns", cols),
                            ("kSheetTiles", tiles)):
            check(re.search(r"\b%s = %s\b" % (name, value), previews), "%s = %s (serve/previews.h)" % (name, value))
        table = find(r"\| the SDK sends \| H3 makes \|\n\s*\|---\|---\|\n(.*?)\n\s*\n", api,
                     "the OpenAI mapping table").group(1)
        for row in table.splitlines():
            sent, made = [c.strip() for c in row.strip().strip("|").split("|")]
            if sent.startswith("`seconds"):
                for v, frames in zip(re.findall(r'"(\d+)"', sent), re.findall(r"(\d+) frames", made)):
                    st, j = s.json("POST", "/v1/videos", {"prompt": "a", "seconds": v, "steps": 2})
                    check(st == 202 and j["parameters"]["frames"] == int(frames), 'seconds "%s" -> %s frames' % (v, frames))
            elif sent.startswith("`size"):
                for v, want in zip(re.findall(r'"(\d+x\d+)"', sent), re.findall(r"(\d+x\d+)", made)):
                    st, j = s.json("POST", "/v1/videos", {"prompt": "a", "size": v, "steps": 2})
                    check(st == 202 and j["size"] == want, "size %s -> %s" % (v, want))
            else:
                want = find(r"(\d+x\d+)", made, "the default size").group(1)
                st, j = s.json("POST", "/v1/videos", {"prompt": "a", "steps": 2})
                check(st == 202 and j["size"] == want, "no size -> %s" % want)


def run(h3):
    top = Help(h3)
    serve = Help(h3, "serve")
    check("serve" in top.commands and "generate" in top.commands, "h3 --help lists the commands")
    options_table(h3, serve, top)
    command_lines(h3, top)
    cli_summary(h3)
    ports(serve)
    probes(h3)


if __name__ == "__main__":
    main_wrapper(run)
