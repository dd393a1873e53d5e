#!/usr/bin/env python3
"""Checks that the README and docs/ do not drift from the tree on what a program can read in them.

  - every repository path they name exists: tokens in `code spans` and fenced code blocks that start with a
    top-level folder of the repository (src/, tools/, tests/, bench/, scripts/, docs/, examples/, .ci/) or name
    one of its top-level files, `{a,b}` alternatives, `*` and `<placeholder>` parts matching at least one file;
    a code span that is a bare file name (`quant.h`, a results file) must exist beside the document or somewhere
    in the tree; relative markdown links must resolve; a path under ../shared/<folder> is checked when that
    folder is beside the checkout (said loudly when not);
  - every `h3 <command>` they show is a real subcommand of the built h3 (`h3 --help` lists them; a hidden one
    must answer `h3 <command> --help`), after the global options `h3 --help` lists.

docs/notes.md is the engineering diary: it records paths and commands as they were then, and is not checked.
Usage: check_docs.py --h3 build/bin/h3 [--root DIR] [FILE.md ...]; --self-test checks the checker on known-bad
input. Exit status 0 when every check passes, 1 otherwise (each failure printed as FILE:LINE: what).
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

ROOT_DIRS = ("src/", "tools/", "tests/", "bench/", "scripts/", "docs/", "examples/", ".ci/")
ROOT_FILES = ("README.md", "CMakeLists.txt", ".clang-format")
SHARED = "../shared/"
NOT_CHECKED = ("docs/notes.md",)  # the diary: paths and commands as they were when written
SOURCE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*\.(h|cuh|cpp|cu|py|sh)$")
DATA_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*\.(json|safetensors|log|txt|csv)$")
PLACEHOLDER = re.compile(r"<[^<>/]*>")


def markdown_files(root):
    files = [os.path.join(root, "README.md")]
    files += sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
    return [f for f in files if os.path.relpath(f, root) not in NOT_CHECKED]


def code_pieces(text):
    """(line number, code text, is a whole span) for inline code spans and fenced code block lines."""
    pieces = []
    fence = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence or line.startswith("    "):
            pieces.append((n, line, False))
            continue
        for m in re.finditer(r"`([^`]+)`", line):
            pieces.append((n, m.group(1), True))
    return pieces


def links(text):
    for n, line in enumerate(text.splitlines(), 1):
        for m in re.finditer(r"\]\(([^)\s]+)\)", line):
            yield n, m.group(1)


def expand_braces(token):
    m = re.search(r"\{([^{}]*,[^{}]*)\}", token)
    if not m:
        return [token]
    out = []
    for alt in m.group(1).split(","):
        out += expand_braces(token[: m.start()] + alt + token[m.end():])
    return out


def exists(base, path):
    """A path with optional *, <placeholder> and {a,b} parts: every alternative must match something."""
    for alt in expand_braces(path):
        pattern = PLACEHOLDER.sub("*", alt)
        full = os.path.normpath(os.path.join(base, pattern))
        if not (glob.glob(full) if "*" in pattern else os.path.exists(full)):
            return False
    return True


def clean(token):
    """A token without the punctuation of the sentence around it (leading dots are part of ../ and .ci/)."""
    return token.lstrip("([\"'").rstrip(")],;:.'\"")


def tree_names(root):
    names = set()
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".git") and not x.startswith("build")]
        names.update(files)
    return names


def check_paths(path, text, root, names, problems, counts):
    doc_dir = os.path.dirname(path)
    rel = os.path.relpath(path, root)
    for n, code, whole_span in code_pieces(text):
        tokens = code.split()
        for raw in tokens:
            tok = clean(raw)
            if tok.startswith(SHARED):
                # ../shared/<folder>/...: checked when that folder is beside the checkout (CI may carry only golden/).
                top = tok[len(SHARED):].split("/")[0]
                if not top or not os.path.isdir(os.path.join(root, SHARED, top)):
                    counts["shared_skipped"] += 1
                    continue
                counts["paths"] += 1
                if not exists(root, tok):
                    problems.append(f"{rel}:{n}: {tok} does not exist")
            elif tok.startswith(ROOT_DIRS) or tok in ROOT_FILES:
                counts["paths"] += 1
                if not exists(root, tok):
                    problems.append(f"{rel}:{n}: {tok} does not exist in the repository")
        # A code span that is a bare file name: a source file must be somewhere in the tree; a data file is checked
        # when the document sits beside data files of its kind (an index such as docs/results/README.md), since
        # elsewhere such names are usually files of a checkpoint or of the user (`config.json`).
        if whole_span and len(tokens) == 1:
            tok = clean(tokens[0])
            ext = os.path.splitext(tok)[1]
            if "/" in tok or PLACEHOLDER.search(tok) or "*" in tok:
                continue
            if SOURCE_NAME.match(tok) or (DATA_NAME.match(tok) and glob.glob(os.path.join(doc_dir, "*" + ext))):
                counts["paths"] += 1
                if not (os.path.exists(os.path.join(doc_dir, tok)) or (SOURCE_NAME.match(tok) and tok in names)):
                    problems.append(f"{rel}:{n}: {tok} is neither beside {rel} nor a source file of the tree")
    for n, target in links(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        counts["paths"] += 1
        if not os.path.exists(os.path.normpath(os.path.join(doc_dir, target.split("#")[0]))):
            problems.append(f"{rel}:{n}: link {target} does not resolve")


def h3_help(h3):
    """The subcommands and the global options (name -> takes a value) that `h3 --help` lists."""
    out = subprocess.run([h3, "--help"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        sys.exit(f"check_docs: `{h3} --help` failed ({out.returncode}): {out.stderr.strip()}")
    commands, options, section = set(), {}, None
    for line in out.stdout.splitlines():
        if re.match(r"^[A-Za-z][A-Za-z ]*:\s*$", line):  # "Options:", "Subcommands:" (CLI11 2.x)
            section = line.strip().rstrip(":").upper()
            continue
        if section == "SUBCOMMANDS":
            m = re.match(r"^\s+([a-z][a-z0-9-]*)(\s|$)", line)
            if m:
                commands.add(m.group(1))
        elif section == "OPTIONS":
            # "  --ranks INT:INT in [1 - 4096]  help": the value's type follows the names after one space; the help
            # text comes after the padding (or on the next line).
            m = re.match(r"^\s+(-[^ ]*(?:, ?-[^ ]*)*)(?: ([A-Z]\S*))?", line)
            if m:
                for name in m.group(1).replace(" ", "").split(","):
                    options[name] = bool(m.group(2))
    if not commands:
        sys.exit(f"check_docs: no SUBCOMMANDS section in `{h3} --help`; the checker must learn the new format")
    return commands, options


def hidden_command(h3, name, cache):
    """A subcommand --help does not list (e.g. serve-worker): real when `h3 NAME --help` prints its own usage line
    ("Usage: .../h3 NAME [OPTIONS]"); for an unknown name h3 prints its main help instead."""
    if name not in cache:
        out = subprocess.run([h3, name, "--help"], capture_output=True, text=True, timeout=60)
        usage = re.search(rf"^Usage: \S*h3 {re.escape(name)}( |$)", out.stdout + out.stderr, re.M)
        cache[name] = out.returncode == 0 and usage is not None
    return cache[name]


def check_commands(path, text, root, h3, commands, options, cache, problems, counts):
    rel = os.path.relpath(path, root)
    for n, code, _ in code_pieces(text):
        tokens = code.split()
        for i, tok in enumerate(tokens):
            if tok != "h3" and not tok.endswith("/h3"):
                continue
            j = i + 1
            while j < len(tokens) and tokens[j].startswith("-"):
                name = tokens[j].split("=")[0]
                if name not in options:
                    problems.append(f"{rel}:{n}: `h3 {tokens[j]}`: not a global option of h3 --help")
                    break
                j += 2 if options[name] and "=" not in tokens[j] else 1
            if j >= len(tokens) or tokens[j].startswith("-"):
                continue
            cmd = tokens[j].strip("`,;:()")
            if not re.match(r"^[a-z][a-z0-9-]*$", cmd):  # a placeholder (<cmd>, CMD, ...) or not a command
                continue
            counts["commands"] += 1
            if cmd not in commands and not hidden_command(h3, cmd, cache):
                problems.append(f"{rel}:{n}: `h3 {cmd}` is not an h3 subcommand (h3 --help lists {', '.join(sorted(commands))})")


def run(root, h3, files):
    commands, options = h3_help(h3)
    names = tree_names(root)
    problems, counts, cache = [], {"paths": 0, "commands": 0, "shared_skipped": 0}, {}
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        check_paths(path, text, root, names, problems, counts)
        check_commands(path, text, root, h3, commands, options, cache, problems, counts)
    for p in problems:
        print(p)
    print(f"check_docs: {len(files)} files, {counts['paths']} paths and {counts['commands']} h3 commands checked, "
          f"{len(problems)} problems")
    if counts["shared_skipped"]:
        print(f"check_docs: SKIPPED LOUDLY: {counts['shared_skipped']} paths under {SHARED} not checked "
              f"(their folder is not beside the checkout)")
    return 1 if problems else 0


def self_test(h3):
    """The checker must catch a missing path, a misspelt bare file name, a wrong link, an unknown command and an
    unknown global option, and pass the same document with those fixed."""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "src", "core"))
        open(os.path.join(root, "src", "core", "tensor.h"), "w").close()
        docs = os.path.join(root, "docs")
        os.makedirs(docs)
        open(os.path.join(docs, "r.json"), "w").close()
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write("A checkpoint's `config.json` is not ours to check (no .json files beside README.md).\n")
        good = ("See `src/core/tensor.h`, `src/core/{tensor,tensor}.h`, `src/core/<name>.h`, `tensor.h`, `r.json`, "
                "[it](r.json).\n"
                "    build/bin/h3 --ranks 2 --device cuda verify x.safetensors\n"
                "`h3 --help`, `h3 <command> --help`.\n")
        bad = ("See `src/core/tensr.h`, `src/core/{tensor,dtype}.h`, `tensr.h`, `rr.json`, [it](r2.json).\n"
               "    build/bin/h3 --ranks 2 verfy x.safetensors\n"
               "`h3 --rank 2 verify`.\n")
        results = {}
        for name, text in (("good", good), ("bad", bad)):
            with open(os.path.join(docs, "test.md"), "w") as f:
                f.write(text)
            out = subprocess.run([sys.executable, __file__, "--h3", h3, "--root", root], capture_output=True,
                                 text=True)
            results[name] = (out.returncode, out.stdout)
        ok = results["good"][0] == 0 and results["bad"][0] == 1 and results["bad"][1].count("docs/test.md:") == 7
        print(results["good"][1] + results["bad"][1])
        print("check_docs self-test:", "PASS" if ok else "FAIL (good must pass, bad must show 7 problems)")
        return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--h3", required=True, help="the built h3 binary")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    if a.self_test:
        return self_test(os.path.abspath(a.h3))
    root = os.path.abspath(a.root)
    files = [os.path.abspath(f) for f in a.files] or markdown_files(root)
    return run(root, os.path.abspath(a.h3), files)


if __name__ == "__main__":
    sys.exit(main())
