#!/usr/bin/env python3
"""h3 serve's web page driven from outside in Debian's Chromium (playwright-core, page_check.mjs): the form and
its defaults, a keyframe dropped and a reference chosen, a LoRA picked, per-phase progress, posters, a video
played inline, one deleted; then the screenshots themselves are checked (decoded here): the banner is drawn,
the poster and the playing video show a picture (not a blank box), and the server agrees with what the page did.
Skips (77, loudly) when node, Chromium or the npm registry is missing.
usage: test_serve_page.py H3_BINARY NODE_DIR SCREENSHOT_DIR"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

import node_packages
from serve_common import SKIP, Server, running, check, log, main_wrapper

IMAGE = os.path.join(node_packages.ROOT, "examples", "first-frame.png")


def write_lora(path):
    """A LoRA file as `h3 serve --lora-dir` lists it (lora_A / lora_B keys; the fake runner merges nothing)."""
    tensors = {"blocks.0.attn.qkv.lora_A.weight": [4, 8], "blocks.0.attn.qkv.lora_B.weight": [8, 4]}
    header, offset = {}, 0
    for name, shape in tensors.items():
        n = shape[0] * shape[1] * 4
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + bytes(offset))


def read_png(path):
    """8-bit RGB / RGBA non-interlaced PNG -> (width, height, channels, rows of bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, "unexpected PNG format in " + path
            ch = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, rows, prev = zlib.decompress(idat), width * ch, [], bytearray(width * ch)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - ch] if i >= ch else 0
            b, c = prev[i], prev[i - ch] if i >= ch else 0
            p = a + b - c
            pred = [0, a, b, (a + b) // 2,
                    a if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c) else b if abs(p - b) <= abs(p - c) else c][f]
            line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, ch, rows


def region_colours(png, box, inset=4):
    """Distinct colours (quantized to 5 bits) inside an element's box of a full-page screenshot."""
    w, h, ch, rows = png
    x0, y0 = int(box["x"]) + inset, int(box["y"]) + inset
    x1, y1 = min(w, int(box["x"] + box["width"]) - inset), min(h, int(box["y"] + box["height"]) - inset)
    seen = set()
    for y in range(y0, y1, 2):
        r = rows[y]
        for x in range(x0, x1, 2):
            seen.add(tuple(v >> 3 for v in r[x * ch:x * ch + 3]))
    return seen


def chromium():
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def run(h3):
    node_dir, shots = os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
    binary = chromium()
    if not binary:
        log("SKIPPED LOUDLY: no chromium on this machine (apt-get install chromium; scripts/setup-test.sh does)")
        sys.exit(SKIP)
    node_packages.ensure(node_dir)
    script = os.path.join(node_dir, "page_check.mjs")
    shutil.copyfile(os.path.join(os.path.dirname(os.path.abspath(__file__)), "page_check.mjs"), script)
    shutil.rmtree(shots, ignore_errors=True)
    os.makedirs(shots)
    loras = tempfile.mkdtemp(prefix="h3-page-loras-")
    write_lora(os.path.join(loras, "sunset-style.safetensors"))
    server = Server(h3, ranks=1, args=["--runner", "fake", "--fake-step-ms", "250", "--fake-load-ms", "0",
                                       "--lora-dir", loras])
    with running(server.start(), loras) as s:
        r = subprocess.run(["node", script, "http://127.0.0.1:%d/" % s.port, shots, IMAGE, "sunset-style.safetensors"],
                           capture_output=True, text=True, timeout=400,
                           env=dict(os.environ, H3_CHROMIUM=binary))
        lines = [l for l in r.stdout.splitlines() if l.startswith("REPORT ")]
        report = json.loads(lines[-1][7:]) if lines else {}
        for c in report.get("checks", []):
            log("  %s: %s" % ("ok" if c["ok"] else "FAILED", c["what"]))
        if r.returncode != 0:
            log(r.stdout[-3000:] + r.stderr[-3000:])
        check(r.returncode == 0 and "error" not in report, "the page did everything asked in Chromium (%s)" %
              report.get("error", "no error"))
        for name in ("1-form", "2-keyframe", "3-progress", "4-gallery", "5-playing", "6-deleted"):
            check(os.path.getsize(report["shots"][name]) > 10000, "screenshot %s.png written" % name)
        form = read_png(report["shots"]["1-form"])
        banner = region_colours(form, report["boxes"]["banner"], inset=1)
        check(any(r >= 28 and g >= 26 and b <= 26 for r, g, b in banner),
              "the banner is drawn in its yellow (%d colours)" % len(banner))
        gallery = read_png(report["shots"]["4-gallery"])
        poster = region_colours(gallery, report["boxes"]["poster"])
        check(len(poster) >= 8, "the poster shows a picture (%d colours in its box)" % len(poster))
        playing = read_png(report["shots"]["5-playing"])
        video = region_colours(playing, report["boxes"]["video"])
        check(len(video) >= 8, "the playing video shows a picture (%d colours in its box)" % len(video))
        st, l = s.json("GET", "/v1/videos?limit=10")
        left = l["data"]
        check(len(left) == 1 and left[0]["id"] != report["deleted"], "the server lost the deleted job, kept the other")
        req = left[0]["request"]
        check(req.get("references", [{}])[0].get("filename") == "first-frame.png" and
              req.get("loras") == [{"name": "sunset-style.safetensors", "strength": 1}],
              "the kept job was made with the reference and the LoRA the page sent")
        st, j = s.json("GET", "/v1/videos/" + report["deleted"])
        check(st == 404, "the deleted job is gone (404)")
        log("screenshots in " + shots)


if __name__ == "__main__":
    main_wrapper(run)
