#!/usr/bin/env python3
"""Compares the sm_90a machine code of every CUDA kernel in two source trees: a check that moving kernels between
files (or deleting unused template instantiations) changed no kernel's bits. Compiles every src/backend/cuda/**/*.cu
of each tree to a cubin with the build's flags (nvcc 13 here; no GPU needed), then compares each kernel's .text
section byte for byte, by name, else by content (a kernel in another file gets another anonymous-namespace name).

usage: cubin_compare.py OLD_ROOT NEW_ROOT   (e.g. OLD_ROOT from `git archive <commit> src | tar -x -C /tmp/old`;
       cubins are cached in /tmp/cubin_compare); prints DIFFERENT / GONE / NEW lines and a summary; exit 1 when a
       kernel of both trees differs.
"""
import hashlib, os, subprocess, sys, glob
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention_sass_check import elf_sections as sections  # noqa: E402 (the ELF reader of the SASS check)
FLAGS = ["-forward-unknown-to-host-compiler", "-O3", "-DNDEBUG", "-ffp-contract=off", "--fmad=false", "-std=c++20", "-DFMT_SHARED", "-DH3_HAVE_CUDA=1",
         "-DH3_HAVE_CUDNN=1", "-DH3_HAVE_NCCL=1", '-DH3_VERSION="0.1.0"', "-DSPDLOG_COMPILED_LIB",
         "-DSPDLOG_FMT_EXTERNAL", "-DSPDLOG_SHARED_LIB", "-arch=sm_90a", "-cubin", "-x", "cu",
         "-I/usr/include/x86_64-linux-gnu/openblas-pthread", "-isystem=/usr/local/cuda/include",
         "-isystem=/usr/lib/x86_64-linux-gnu/openmpi/include", "-isystem=/usr/lib/x86_64-linux-gnu/openmpi/include/openmpi"]
def kernels(root, tag):
    out = {}
    for f in sorted(glob.glob(f"{root}/src/backend/cuda/**/*.cu", recursive=True)):
        cub = f"/tmp/cubin_compare/{tag}_" + f.replace("/", "_") + ".cubin"
        if not os.path.exists(cub):
            subprocess.run(["nice", "-n", "19", "/usr/local/cuda/bin/nvcc", *FLAGS, f"-I{root}/src", f"-I{root}/include", f, "-o", cub], check=True)
        for n, b in sections(open(cub, "rb").read()).items():
            if n.startswith(".text."): out[n[6:]] = (b, os.path.relpath(f, root))
    return out
os.makedirs("/tmp/cubin_compare", exist_ok=True)
old = kernels(sys.argv[1], "old"); new = kernels(sys.argv[2], "new")
same = diff = 0
newby = {}
for n, (b, f) in new.items(): newby.setdefault(hashlib.sha1(b).hexdigest(), []).append(n)
for n, (b, f) in sorted(old.items()):
    if n in new:
        if new[n][0] == b: same += 1
        else: diff += 1; print(f"DIFFERENT {n} ({f} -> {new[n][1]}, {len(b)} vs {len(new[n][0])} bytes)")
    else:
        h = hashlib.sha1(b).hexdigest()
        if h in newby: same += 1; print(f"renamed, same bytes: {n} -> {newby[h]}")
        else: print(f"GONE (no kernel with its bytes): {n} ({f})")
for n in sorted(set(new) - set(old)):
    h = hashlib.sha1(new[n][0]).hexdigest()
    if not any(hashlib.sha1(b).hexdigest() == h for b, _ in old.values()): print(f"NEW: {n} ({new[n][1]})")
print(f"same {same}, different {diff}, old {len(old)}, new {len(new)}")
sys.exit(1 if diff else 0)
