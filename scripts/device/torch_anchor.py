#!/usr/bin/env python3
"""The diffusers-style anchor, timed in the same device call as `h3 bench` (performance.md: "compare against the
diffusers anchor measured in the same run where possible (ratio, not absolute time)").

What it runs: the H3 DiT's 50 joint blocks as plain PyTorch bf16 ops, the way the diffusers port composes them
(eager mode, one op per step): per-block AdaLN table (Linear 2688 -> 18 x 5376 for the M timesteps), RMSNorm +
per-row modulation gathered from the table, separate q/k/v projections, per-head q/k RMSNorm, rotate-half RoPE on
96 of the 128 channels, torch scaled_dot_product_attention over the whole packed sequence, the output projection,
gated residuals and the SwiGLU MLP (5376 -> 2 x 14336 -> 5376). Random weights (the anchor's "random weights"),
no checkpoint. This is our own timing model of the reference's work, not the diffusers code: it does the same
GEMMs and attention with the same shapes and dtypes, and torch's element-wise kernels in between.

Usage (on the device): python3 scripts/device/torch_anchor.py [--res 480p 768p] [--backend default cudnn flash]
                       [--reps 3] [--json out.json]
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F

H, INNER, HEADS, HD, FFN, BLOCKS, ADA = 5376, 7168, 56, 128, 14336, 50, 2688
ROT = 96  # rotated channels per head (48 angles, duplicated)
SEQ = {"480p": 14908, "768p": 37830}


def rms(x, w, eps=1e-6):
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rope(x, cos, sin):  # x [S, heads, 128]; cos/sin [S, 1, ROT]
    r, rest = x[..., :ROT], x[..., ROT:]
    a, b = r[..., : ROT // 2], r[..., ROT // 2:]
    rot = torch.cat((-b, a), dim=-1)
    return torch.cat((r * cos + rot * sin, rest), dim=-1)


class Block:
    def __init__(self, dev, gen):
        def w(*shape, std=0.02):
            return (torch.randn(*shape, device=dev, dtype=torch.bfloat16, generator=gen) * std)

        self.ada = w(18 * H, ADA)
        self.q, self.k, self.v = w(INNER, H), w(INNER, H), w(INNER, H)
        self.out = w(H, INNER)
        self.fc1, self.fc2 = w(2 * FFN, H), w(H, FFN)
        self.n1, self.n2 = torch.ones(H, device=dev, dtype=torch.bfloat16), torch.ones(H, device=dev, dtype=torch.bfloat16)
        self.nq, self.nk = torch.ones(HD, device=dev, dtype=torch.bfloat16), torch.ones(HD, device=dev, dtype=torch.bfloat16)

    def __call__(self, x, ada_in, idx, cos, sin):
        S = x.shape[0]
        table = F.linear(ada_in, self.ada).view(-1, 6, H)  # [M * 3 rows, 6, H]
        p = [table[idx, k] for k in range(6)]  # per-row shift/scale/gate, [S, H] each
        h = rms(x, self.n1) * (1 + p[1]) + p[0]
        q = F.linear(h, self.q).view(S, HEADS, HD)
        k = F.linear(h, self.k).view(S, HEADS, HD)
        v = F.linear(h, self.v).view(S, HEADS, HD)
        q, k = rope(rms(q, self.nq), cos, sin), rope(rms(k, self.nk), cos, sin)
        o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None])
        o = o[0].transpose(0, 1).reshape(S, INNER)
        x = x + p[2] * F.linear(o, self.out)
        h = rms(x, self.n2) * (1 + p[4]) + p[3]
        u = F.linear(h, self.fc1)
        val, gate = u[:, :FFN], u[:, FFN:]
        x = x + p[5] * F.linear(val * F.silu(gate), self.fc2)
        return x


def backend_ctx(name):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if name == "default":
        import contextlib
        return contextlib.nullcontext()
    return sdpa_kernel({"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                        "efficient": SDPBackend.EFFICIENT_ATTENTION}[name])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--res", nargs="+", default=["480p", "768p"])
    ap.add_argument("--backend", nargs="+", default=["default", "cudnn"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev)
    gen.manual_seed(20261201)
    blocks = [Block(dev, gen) for _ in range(BLOCKS)]
    torch.cuda.synchronize()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, weights "
          f"{torch.cuda.memory_allocated() / 2**30:.1f} GiB", flush=True)
    results = []
    for res in a.res:
        S = SEQ[res]
        x0 = torch.randn(S, H, device=dev, dtype=torch.bfloat16, generator=gen)
        M = 2  # two distinct timesteps (conditions and target), three modality rows each
        ada_in = torch.randn(3 * M, ADA, device=dev, dtype=torch.bfloat16, generator=gen)
        idx = torch.randint(0, 3 * M, (S,), device=dev, generator=gen)
        ang = torch.rand(S, 1, ROT, device=dev, generator=gen) * 6.283
        cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
        for be in a.backend:
            with torch.no_grad(), backend_ctx(be):
                def forward():
                    x = x0
                    for b in blocks:
                        x = b(x, ada_in, idx, cos, sin)
                    return x
                forward()  # warm-up
                times = []
                for _ in range(a.reps):
                    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    t0.record()
                    forward()
                    t1.record()
                    t1.synchronize()
                    times.append(t0.elapsed_time(t1) / 1e3)
            s = statistics.median(times)
            peak = torch.cuda.max_memory_allocated() / 2**30
            print(f"{res:5s} S={S:6d} sdpa={be:8s} {s:8.3f} s/forward (reps {', '.join(f'{t:.3f}' for t in times)}), "
                  f"peak {peak:.1f} GiB", flush=True)
            results.append({"res": res, "S": S, "backend": be, "seconds_per_forward": s, "reps": times,
                            "peak_gib": peak, "torch": torch.__version__, "gpu": torch.cuda.get_device_name()})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
