#!/usr/bin/env python3
"""Prints an inline-PTX wrapper for one wgmma with a long accumulator list (those in
src/backend/cuda/cuda_attention_wgmma*.cu were written by it):

    scripts/wgmma_operands.py NAME N KIND     # KIND: e4m3 (m64nNk32, both operands from shared memory) or bf16
                                              # (m64nNk16, the same, no transposes)

e.g. `scripts/wgmma_operands.py mma_ss224 224 e4m3`. The function takes float (&d)[N / 2], two shared-memory
descriptors and an accumulate flag (0: d = A B, else d += A B).
"""
import sys


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


def wrapper(name, n, kind):
    regs = n // 2  # f32 accumulators a thread holds of an m64nN tile
    shape = f'm64n{n}k32.f32.e4m3.e4m3' if kind == 'e4m3' else f'm64n{n}k16.f32.bf16.bf16'
    tail = 'p, 1, 1' if kind == 'e4m3' else 'p, 1, 1, 0, 0'  # scale-d predicate, scales (bf16: no transposes)
    return f'''__device__ __forceinline__ void {name}(float (&d)[{regs}], uint64_t a, uint64_t b, int accumulate) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 2}, 0;\\n"
      "wgmma.mma_async.sync.aligned.{shape} {{"
{placeholders(regs)}
      "}}, %{regs}, %{regs + 1}, {tail};\\n}}\\n"
      :
{operand_lines(regs, '"+f"(d[%d])')}
      : "l"(a), "l"(b), "r"(accumulate));
}}
'''


if __name__ == '__main__':
    if len(sys.argv) != 4 or sys.argv[3] not in ('e4m3', 'bf16') or not sys.argv[2].isdigit():
        sys.exit(__doc__)
    n = int(sys.argv[2])
    if n % 8 or not 8 <= n <= 256:
        sys.exit(f'N = {n}: wgmma takes N a multiple of 8 from 8 to 256')
    print(wrapper(sys.argv[1], n, sys.argv[3]), end='')
