#!/usr/bin/env python3
"""The include graph of src/ against the layering of docs/architecture.md (CTest source.layers).

Layers, lowest first: core -> ops -> io -> backend -> distributed -> media -> model -> pipeline -> verify -> serve (tools/
above them all). Fails on:
  - an include from a lower layer to a higher one (a folder may include its own layer and those below it);
  - a loop between folders (the graph of second-level folders, e.g. model/dit, backend/cuda, must have no cycle);
  - any backend/ header included under src/model/ (models reach devices through the op API only);
  - any getenv outside src/core/knobs.* and tools/main.cpp (run-time options are core/knobs.h's table).

usage: check_layers.py [ROOT]   (ROOT: the checkout, default: this script's parent folder); exit 0 clean, 1 not.
"""
import os
import re
import sys

LAYERS = ["core", "ops", "io", "backend", "distributed", "media", "model", "pipeline", "verify", "serve"]
RANK = {name: i for i, name in enumerate(LAYERS)}
SOURCES = (".h", ".cpp", ".cu", ".cuh")
GETENV_ALLOWED = {"src/core/knobs.h", "src/core/knobs.cpp", "tools/main.cpp"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
GETENV = re.compile(r"\b(?:secure_)?getenv\s*\(")


def folder(rel):
    """The second-level folder of a path under src/ ("model/dit", "backend/cuda", or "core" for core/x.h)."""
    parts = rel.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def find_cycle(graph):
    """One cycle of the directed graph {node: set(nodes)} as a list of nodes, or None."""
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    src = os.path.join(root, "src")
    bad = []
    graph = {}
    files = 0
    for top in ("src", "tools"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                rel_root = os.path.relpath(path, root)
                text = open(path, errors="replace").read()
                files += 1
                if GETENV.search(strip_comments(text)) and rel_root not in GETENV_ALLOWED:
                    bad.append(f"{rel_root}: reads the environment (getenv); add a knob to src/core/knobs.cpp instead")
                if top != "src":
                    continue
                rel = os.path.relpath(path, src)
                layer = rel.split("/")[0]
                if layer not in RANK:
                    bad.append(f"src/{rel}: folder '{layer}' is in no layer (scripts/check_layers.py: LAYERS)")
                    continue
                for inc in INCLUDE.findall(text):
                    target = inc.split("/")[0]
                    if target not in RANK:
                        continue  # a system or third-party header, or one beside the file
                    if RANK[target] > RANK[layer]:
                        bad.append(f"src/{rel} -> {inc}: {layer} includes the higher layer {target}")
                    if layer == "model" and target == "backend":
                        bad.append(f"src/{rel} -> {inc}: model code includes a backend header (use the op API)")
                    a, b = folder(rel), folder(inc)
                    if a != b:
                        graph.setdefault(a, set()).add(b)
    cycle = find_cycle(graph)
    if cycle:
        bad.append("folder loop: " + " -> ".join(cycle))
    for line in bad:
        print(line)
    print(f"layers: {files} files, {sum(len(v) for v in graph.values())} folder edges, "
          f"{'clean' if not bad else f'{len(bad)} problem(s)'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
