# Which precision flow does this machine's PyTorch give the video VAE decoder's f32 RMSNorm inside an f64 run
# (diffusers: norm(x.float()) with a float64 module)? Prints the CPU sum's vector width (8 or 16 float lanes,
# as the engine's ops::torch_cpu_sum_f32 models it) and whether rms_norm casts back to f32 after the f64 weight.
# The engine assumes 8 lanes and the cast (kReferenceSumLanes, docs/notes.md 2026-12-01). Run it also with
# ATEN_CPU_CAPABILITY=avx2 to see the other width.
import random, struct, torch

def f32(x):
    return struct.unpack('<f', struct.pack('<f', x))[0]

def lanes_sum(x, lanes):
    # n = 2 * lanes .. 4 * lanes elements, no cascade levels: per-lane sums of the vectors, then the lanes.
    vecs = len(x) // lanes
    total = 0.0
    for l in range(lanes):
        e = 0.0
        for v in range(vecs):
            e = f32(e + x[v * lanes + l])
        total = f32(total + e)
    return total

print("torch", torch.__version__, "cpu capability", torch.backends.cpu.get_cpu_capability())
random.seed(1)
x = [f32(random.uniform(1, 2) * 2.0 ** random.randint(-12, 12)) for _ in range(32)]
got = torch.tensor(x, dtype=torch.float32).sum().item()
print("sum of 32 floats:", repr(got), "| 8 lanes:", repr(lanes_sum(x, 8)), "| 16 lanes:", repr(lanes_sum(x, 16)))
print("sum order:", "8 lanes" if got == lanes_sum(x, 8) else "16 lanes" if got == lanes_sum(x, 16) else "neither")

h = torch.randn(4, 16, dtype=torch.float64)
w = 1 + 0.1 * torch.randn(16, dtype=torch.float64)
norm = torch.nn.RMSNorm(16, eps=1e-5).double()
with torch.no_grad():
    norm.weight.copy_(w)
    out = norm(h.float())
xf = h.float()
r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)
cast = ((xf * r).double() * w).float()
print("rms_norm(f32 x, f64 weight) dtype:", out.dtype, "| equals f32(f64(x*r) * w):", torch.equal(out.double(), cast.double()))
