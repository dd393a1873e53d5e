#!/usr/bin/env python3
"""Writes src/backend/cuda/attention/wgmma_mma.cuh: the inline-PTX wrappers of the wgmma MMAs our attention kernels issue
(their accumulator operand lists run to 112 registers, so they are generated, not typed):

    scripts/wgmma_operands.py > src/backend/cuda/attention/wgmma_mma.cuh

Each m64nN wrapper takes float (&d)[N / 2] (the f32 accumulators a thread holds) and a shared-memory descriptor for
B. The _ss ones take A by descriptor too and an accumulate flag (0: d = A B, else d += A B); the _rs ones take A from
four registers and always accumulate. The _h ones accumulate in f16: uint32_t (&d)[N / 4], each register the pair of
adjacent columns that two f32 accumulators would hold (the lower column in the low half).
"""
import sys

# (name, N, kind, A from registers). kind e4m3: k32, both operands K-major (e4m3h: the same into f16 accumulators);
# bf16: k16, B read N-major (transposed) when A comes from registers (V in P V), K-major otherwise.
WRAPPERS = [
    ('mma_bf16_ss_n128', 128, 'bf16', False),
    ('mma_bf16_ss_n192', 192, 'bf16', False),
    ('mma_bf16_rs_n128', 128, 'bf16', True),
    ('mma_e4m3_ss_n128', 128, 'e4m3', False),
    ('mma_e4m3_ss_n224', 224, 'e4m3', False),
    ('mma_e4m3_ss_n128_h', 128, 'e4m3h', False),
    ('mma_e4m3_rs_n128', 128, 'e4m3', True),
]


def operand_lines(n, template, indent=8, width=118):
    """template % i for i < n, comma-separated, wrapped to `width` columns."""
    lines, line = [], ' ' * (indent - 1)
    for i in range(n):
        token = template % i
        if len(line) + len(token) + 2 > width:
            lines.append(line.rstrip())
            line = ' ' * (indent - 1)
        line += ' ' + token + ','
    lines.append(line.rstrip(','))
    return '\n'.join(lines)


def placeholders(n):
    """The asm string's "%0, %1, ..." for the n accumulator registers, 16 a line."""
    names = ['%%%d' % i for i in range(n)]
    rows = []
    for i in range(0, n, 16):
        last = i + 16 >= n
        rows.append('      "' + ', '.join(names[i:i + 16]) + ('"' if last else ', "'))
    return '\n'.join(rows)


def wrapper(name, n, kind, a_in_registers):
    half = kind == 'e4m3h'
    regs = n // 4 if half else n // 2  # accumulator registers a thread holds of an m64nN tile
    shape = {'e4m3': f'm64n{n}k32.f32.e4m3.e4m3', 'e4m3h': f'm64n{n}k32.f16.e4m3.e4m3',
             'bf16': f'm64n{n}k16.f32.bf16.bf16'}[kind]
    outputs = operand_lines(regs, '"+r"(d[%d])' if half else '"+f"(d[%d])')
    acc = 'uint32_t' if half else 'float'
    if a_in_registers:
        # scale-d 1 (accumulate), A and B unscaled; bf16: B transposed.
        tail = '1, 1, 1' if kind == 'e4m3' else '1, 1, 1, 1'
        return f'''__device__ __forceinline__ void {name}(float (&d)[{regs}], const uint32_t (&a)[4], uint64_t b) {{
  asm volatile(
      "wgmma.mma_async.sync.aligned.{shape} {{"
{placeholders(regs)}
      "}}, {{%{regs}, %{regs + 1}, %{regs + 2}, %{regs + 3}}}, %{regs + 4}, {tail};\\n"
      :
{outputs}
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}}
'''
    tail = 'p, 1, 1' if kind != 'bf16' else 'p, 1, 1, 0, 0'  # scale-d predicate, A and B unscaled (bf16: K-major)
    return f'''__device__ __forceinline__ void {name}({acc} (&d)[{regs}], uint64_t a, uint64_t b, int accumulate) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 2}, 0;\\n"
      "wgmma.mma_async.sync.aligned.{shape} {{"
{placeholders(regs)}
      "}}, %{regs}, %{regs + 1}, {tail};\\n}}\\n"
      :
{outputs}
      : "l"(a), "l"(b), "r"(accumulate));
}}
'''


def header():
    parts = [
        '// Written by scripts/wgmma_operands.py (edit that, then run it: scripts/wgmma_operands.py > this file).\n'
        '// The wgmma MMAs of our attention kernels as inline PTX: m64nN f32 accumulators a thread holds in d (_h: f16\n'
        '// pairs), A and B by shared-memory descriptor (_ss, with an accumulate flag) or A from registers (_rs). CUDA\n'
        '// sources only, after backend/cuda/attention/wgmma.cuh.\n'
        '#pragma once\n#include <cstdint>\n\n#include "backend/cuda/attention/wgmma.cuh"\n\n'
        'namespace h3::cuda::wgmma {\n\n#ifdef H3_WGMMA_BODY\n'
    ]
    parts += [wrapper(*w) + '\n' for w in WRAPPERS]
    parts.append('#endif  // H3_WGMMA_BODY\n\n}  // namespace h3::cuda::wgmma\n')
    return ''.join(parts)


if __name__ == '__main__':
    if len(sys.argv) != 1:
        sys.exit(__doc__)
    sys.stdout.write(header())
