#!/usr/bin/env python3
"""Checks what ptxas decides about our Hopper attention kernels and no other test would notice (each costs speed,
never correctness): spills, serialized wgmma pipelines, and where the wait for tile j-1's P V sits.

ptxas schedules that wait (WARPGROUP.DEPBAR.LE gsb0, 0x0) as early as its basic block allows, above the softmax of
tile j, unless a never-taken branch ends the block (backend/cuda/attention/wgmma.cuh: block_boundary_after). This script compiles
the two kernel files to sm_90a cubins, reads the machine code from the ELF (no cuobjdump needed), and counts the
exponentials (MUFU) between S_j's wait (DEPBAR ... 0x1) and P V's (... 0x0) in each kernel's loop.

Opcodes: the low 9 bits of an instruction's first 64-bit word, as seen in `cuobjdump -sass` dumps of these kernels
(CUDA 13.0); a DEPBAR is a WARPGROUP instruction with bit 47 set, its count in bits 8-9 of the second word. Other
nvcc releases may schedule differently: the check then reports itself skipped (exit 77) rather than guess.

usage: attention_sass_check.py --nvcc PATH [--src DIR] [--work DIR]; exit 0 ok, 1 a check failed, 77 skipped.
"""
import argparse
import os
import re
import struct
import subprocess
import sys
import tempfile

NVCC_RELEASE = "13.0"
MUFU, WARPGROUP = 0x108, 0x1C5

# (file, kernel-name pattern, least exponentials above the P V wait). Measured with 13.0: FP8 e4m3 O 95 (f32 scores,
# 224 keys), 66 (f16 scores, 128 keys, three warpgroups), bf16 49 (192); the FP8 kernel with a bf16 O keeps no
# boundary (it would spill).
KERNELS = [
    ("backend/cuda/attention/wgmma_fp8.cu", "ConfigILi224ELi2ELb0EEELb1E", 80),
    ("backend/cuda/attention/wgmma_fp8.cu", "ConfigILi224ELi2ELb0EEELb0E", 0),
    ("backend/cuda/attention/wgmma_fp8.cu", "ConfigILi128ELi3ELb1EEELb1E", 50),
    ("backend/cuda/attention/wgmma_fp8.cu", "ConfigILi128ELi3ELb1EEELb0E", 0),
    ("backend/cuda/attention/wgmma_bf16.cu", "attention_kernelILi192EE", 40),
]


def elf_sections(data):
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx][4]

    def name(offset):
        end = data.index(b"\0", strtab + offset)
        return data[strtab + offset:end].decode()

    return {name(h[0]): data[h[4]:h[4] + h[5]] for h in headers}


def instructions(text):
    """(kind, count) per instruction: kind 'MUFU', 'DEPBAR' (count = its wait-group bound), 'ARRIVE' or 'other'."""
    out = []
    for i in range(0, len(text), 16):
        lo, hi = struct.unpack_from("<QQ", text, i)
        op = lo & 0x1FF
        if op == MUFU:
            out.append(("MUFU", 0))
        elif op == WARPGROUP:
            out.append(("DEPBAR", (hi >> 8) & 3) if (lo >> 47) & 1 else ("ARRIVE", 0))
        else:
            out.append(("other", 0))
    return out


def exponentials_above_wait(code):
    """MUFU between the loop's S wait (DEPBAR 1) and the next P V wait (DEPBAR 0); None without an S wait."""
    kinds = instructions(code)
    starts = [i for i, (k, n) in enumerate(kinds) if k == "DEPBAR" and n == 1]
    if len(starts) != 1:
        return None
    count = 0
    for k, n in kinds[starts[0] + 1:]:
        if k == "DEPBAR" and n == 0:
            return count
        count += k == "MUFU"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nvcc", required=True)
    ap.add_argument("--src", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    ap.add_argument("--work", default=None, help="where the cubins go (default: a temporary folder)")
    args = ap.parse_args()

    version = subprocess.run([args.nvcc, "--version"], capture_output=True, text=True).stdout
    if f"release {NVCC_RELEASE}" not in version:
        print(f"SKIPPED LOUDLY: attention_sass_check expects nvcc {NVCC_RELEASE} (the release its counts were "
              f"measured with); {args.nvcc} says: {version.strip().splitlines()[-1] if version else 'nothing'}")
        return 77

    work = args.work or tempfile.mkdtemp(prefix="h3-sass-")
    failures = []
    for name in sorted({f for f, _, _ in KERNELS}):
        source = os.path.join(args.src, name)
        cubin = os.path.join(work, os.path.basename(name) + ".cubin")
        cmd = [args.nvcc, "-O3", "-std=c++20", "-cubin", "-arch=sm_90a", "-I", args.src, "-Xptxas", "-v",
               source, "-o", cubin]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            print(run.stdout + run.stderr)
            failures.append(f"{name}: nvcc failed ({' '.join(cmd)})")
            continue
        # ptxas -v: each function's "Compiling entry function 'NAME'" line, then its spill line; C75xx notes name
        # the function whose wgmma pipeline it serialized.
        current, spills = None, {}
        for line in run.stderr.splitlines():
            m = re.search(r"Compiling entry function '([^']+)'", line)
            if m:
                current = m.group(1)
            m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
            if m and current:
                spills[current] = int(m.group(1)) + int(m.group(2))
            if re.search(r"\(C75\d\d\)", line):
                failures.append(f"{name}: ptxas serialized a wgmma pipeline: {line.strip()}")
        sections = elf_sections(open(cubin, "rb").read())
        for file, pattern, least in KERNELS:
            if file != name:
                continue
            found = [(n, t) for n, t in sections.items() if n.startswith(".text.") and pattern in n]
            if len(found) != 1:
                failures.append(f"{name}: expected one kernel matching {pattern}, found {len(found)}")
                continue
            fn, code = found[0][0][len(".text."):], found[0][1]
            spilled = spills.get(fn)
            above = exponentials_above_wait(code)
            print(f"{pattern:36s} {len(code) // 16:5d} instructions, spill bytes {spilled}, "
                  f"exponentials above the P V wait {above} (at least {least})")
            if spilled is None:
                failures.append(f"{pattern}: no ptxas -v line for {fn}")
            elif spilled:
                failures.append(f"{pattern}: ptxas spills {spilled} bytes")
            if above is None:
                failures.append(f"{pattern}: no S wait (DEPBAR 0x1) followed by a P V wait (0x0) found")
            elif above < least:
                failures.append(f"{pattern}: {above} exponentials above the P V wait, expected >= {least} (ptxas "
                                f"hoisted the wait above the softmax again? see backend/cuda/attention/wgmma.cuh: block_boundary_after)")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
