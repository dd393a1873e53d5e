# Which f32 sin/cos/exp values does PyTorch's CPU (and CUDA) timestep embedding produce, compared with the
# correctly rounded ones? Used to trace a 1-ulp difference between the engine and the reference (see docs/notes).
import math, struct, torch
def f32(x): return struct.unpack('<f', struct.pack('<f', x))[0]
ts = [0.027027010917663574, 0.10000002384185791, 0.07692307233810425, 0.25, 0.9990000128746033]
half = 16
print("torch", torch.__version__, "cpu capability", torch.backends.cpu.get_cpu_capability())
for dev in ["cpu", "cuda"]:
    t = torch.tensor(ts, dtype=torch.float32, device=dev)
    exponent = -math.log(10000) * torch.arange(0, half, dtype=torch.float32, device=dev) / half
    freq = torch.exp(exponent)
    arg = t[:, None] * freq[None, :]
    c, s = torch.cos(arg).cpu(), torch.sin(arg).cpu()
    freq_c, arg_c = freq.cpu(), arg.cpu()
    for i, tv in enumerate(ts):
        for k in range(half):
            e = f32(f32(f32(-math.log(10000)) * k) / half)
            fr = f32(math.exp(e))
            if fr != freq_c[k].item() and i == 0: print(dev, "exp differs k", k, fr, freq_c[k].item())
            a = arg_c[i, k].item()
            if f32(math.cos(a)) != c[i, k].item(): print(dev, "cos differs t", tv, "k", k, repr(f32(math.cos(a))), repr(c[i, k].item()))
            if f32(math.sin(a)) != s[i, k].item(): print(dev, "sin differs t", tv, "k", k, repr(f32(math.sin(a))), repr(s[i, k].item()))
