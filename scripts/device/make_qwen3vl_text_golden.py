#!/usr/bin/env python3
# Reference tensors for the Qwen3-VL text tower at the released width (hidden 5120, 64 query / 8 KV heads x 128,
# FFN 25600, mRoPE [24, 20, 20] interleaved, theta 5e6) over its first few decoder layers, from transformers' own
# Qwen3VLTextModel with procedural weights (the formula of shared/golden/README.md, regenerated here on the GPU and
# by the engine, so the file holds inputs and outputs only). Run on the device machine (torch, transformers 5.x,
# one GPU; no network):
#
#     python3 scripts/device/make_qwen3vl_text_golden.py OUT.safetensors [qwen3vl-text-mini.safetensors]
#
# and commit OUT.safetensors as tests/reference/qwen3vl-text-fullwidth.safetensors; `h3 --device cuda verify` checks
# it (bf16 within 1.5x of transformers' own bf16 error, f32 within 1e-5).
#
# Weights: parameter `name` (Qwen3VLTextModel's own keys: embed_tokens.weight, layers.N.self_attn.q_proj.weight,
# ...) holds float32(offset + u(name, i) * scale), i row-major, u from splitmix64((seed ^ fnv1a64(name)) + i)
# (README). The vocabulary is cut to VOCAB rows: a row's values do not depend on how many rows the table has.
# Runs: f64 (the reference; eager attention, no TF32), transformers' bf16 run (the model cast to bfloat16, SDPA as
# transformers picks it, torch's default GEMM settings) and its f32 run, both only measured against f64 (their errors
# go to the metadata). The rotary inv_freq buffer stays f32 in every run, as from_pretrained(dtype=...) leaves it
# (a model.to(bfloat16) would round it to bf16, which no released run does).
# Cases: `t24` (24 tokens, text positions) and `m72` (6 text tokens, a 6 x 10 vision-style block with Qwen3-VL's
# mRoPE grid positions, 6 text tokens). Stored per case: input_ids, position_ids [3, N], and the f64 run's
# hidden_states.K for K in STATES (decoder layer K-1's output, before any final norm) rounded to f32 (1e-7
# relative, far below the bf16 error it is compared with).
# With the golden qwen3vl-text-mini.safetensors (shared/golden) as second argument, transformers' bf16 run of that
# model is measured against its f64 states too (metadata mini_bf16_rel_l2_vs_f64): the bound of the engine's bf16
# path on the mini tower (tests/CMakeLists.txt, 1.5x).
import json
import math
import sys
import time
import traceback

from qwen3vl_reference import config_with_rope_fallbacks, die, import_reference

if len(sys.argv) not in (2, 3):
    die("usage: make_qwen3vl_text_golden.py OUT.safetensors [qwen3vl-text-mini.safetensors]")
OUT = sys.argv[1]
MINI = sys.argv[2] if len(sys.argv) == 3 else None

torch, transformers, mq, Qwen3VLTextConfig, save_file = import_reference("Qwen3VLTextConfig")
if not torch.cuda.is_available():
    die("no CUDA device: this script runs the released width on the GPU")

t_start = time.time()
dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
print("torch", torch.__version__, "transformers", transformers.__version__, "GPU", torch.cuda.get_device_name(0))

SEED = 20261202
VOCAB = 4096
LAYERS = 3
STATES = [1, 3]
MROPE = [24, 20, 20]
THETA = 5000000.0
text_cfg = dict(
    vocab_size=VOCAB,
    hidden_size=5120,
    intermediate_size=25600,
    num_hidden_layers=LAYERS,
    num_attention_heads=64,
    num_key_value_heads=8,
    head_dim=128,
    hidden_act="silu",
    rms_norm_eps=1e-6,
    max_position_embeddings=262144,
    attention_bias=False,
    tie_word_embeddings=False,
    rope_theta=THETA,
    rope_parameters={"rope_type": "default", "rope_theta": THETA, "mrope_section": MROPE, "mrope_interleaved": True},
    rope_scaling={"rope_type": "default", "rope_theta": THETA, "mrope_section": MROPE, "mrope_interleaved": True},
)


cfg = config_with_rope_fallbacks(lambda tc: Qwen3VLTextConfig(**tc), text_cfg, "Qwen3VLTextConfig")
cfg._attn_implementation = "eager"
with torch.device(dev):
    try:
        model = mq.Qwen3VLTextModel(cfg)
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        die(f"cannot build Qwen3VLTextModel: {e}")
model.eval()
rot = model.rotary_emb
inv = rot.inv_freq.double().cpu()
eff_theta = float(inv[1] ** (-128 / 2.0))
eff_section = list(getattr(rot, "mrope_section", []))
print(f"model rope: theta ~{eff_theta:.6g}, mrope_section {eff_section}")
if abs(eff_theta - THETA) > 1e-3 * THETA or eff_section != MROPE:
    die(f"the model did not take the intended rope settings (theta {eff_theta}, section {eff_section})")

# ---------------------------------------------------------------- procedural weights (README formula)
M64 = (1 << 64) - 1


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for c in s.encode("utf-8"):
        h ^= c
        h = (h * 0x100000001B3) & M64
    return h


def splitmix64_int(z):
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def as_i64(u):
    return u - (1 << 64) if u >= (1 << 63) else u


def lsr(z, s):  # logical shift right of int64 tensors holding uint64 bits
    return (z >> s) & ((1 << (64 - s)) - 1)


def splitmix64_t(z):  # int64 arithmetic wraps mod 2^64: the uint64 bits of the formula
    z = z + as_i64(0x9E3779B97F4A7C15)
    z = (z ^ lsr(z, 30)) * as_i64(0xBF58476D1CE4E5B9)
    z = (z ^ lsr(z, 27)) * as_i64(0x94D049BB133111EB)
    return z ^ lsr(z, 31)


def rule(name, shape):
    if len(shape) >= 2:
        fan_in = math.prod(shape[1:])
        return math.sqrt(3.0 / fan_in), 0.0
    if "norm" in name:
        return 0.1, 1.0
    return 0.05, 0.0


def procedural(name, shape, chunk=1 << 26):
    base = (SEED ^ fnv1a64(name)) & M64
    scale, offset = rule(name, shape)
    n = math.prod(shape)
    out = torch.empty(n, dtype=torch.float32, device=dev)
    for b in range(0, n, chunk):
        e = min(n, b + chunk)
        i = torch.arange(b, e, dtype=torch.int64, device=dev)
        z = splitmix64_t(i + as_i64(base))
        u = lsr(z, 11).to(torch.float64) * (2.0 ** -53) * 2.0 - 1.0
        out[b:e] = (offset + u * scale).to(torch.float32)
    return out.view(*shape)


def check_procedural():
    # The tensor path against exact Python integers at a few indices, including large ones.
    name, shape = "layers.2.mlp.down_proj.weight", (5120, 25600)
    base = (SEED ^ fnv1a64(name)) & M64
    scale, offset = rule(name, shape)
    t = procedural(name, shape).view(-1)
    for i in (0, 1, 12345, 5120 * 25600 - 1, 99999999):
        u = (splitmix64_int((base + i) & M64) >> 11) * (2.0 ** -53) * 2.0 - 1.0
        want = torch.tensor(offset + u * scale, dtype=torch.float64).to(torch.float32).item()
        got = t[i].item()
        if got != want:
            die(f"procedural check failed at {name}[{i}]: tensor {got!r} vs exact {want!r}")
    print("procedural weights: tensor path equals the exact formula at 5 indices")


check_procedural()
names = []
with torch.no_grad():
    for name, p in model.named_parameters():
        p.copy_(procedural(name, tuple(p.shape)))
        names.append(name)
print(f"{len(names)} parameters filled ({sum(p.numel() for p in model.parameters()) / 1e9:.2f} G values)")

# ---------------------------------------------------------------- inputs
g = torch.Generator().manual_seed(11)


def text_positions(n, start):
    return [[start + i for i in range(n)] for _ in range(3)]


cases = {}
ids_t = torch.randint(0, VOCAB, (24,), generator=g)
cases["t24"] = (ids_t, torch.tensor(text_positions(24, 0), dtype=torch.int64))
# m72: 6 text tokens, a 6 x 10 block at s = 6 (t = s, h = s + row, w = s + col), then text from s + max(6, 10).
pos = [[], [], []]
for i in range(6):
    for a in range(3):
        pos[a].append(i)
s = 6
for r in range(6):
    for c in range(10):
        pos[0].append(s)
        pos[1].append(s + r)
        pos[2].append(s + c)
nxt = s + 10
for i in range(6):
    for a in range(3):
        pos[a].append(nxt + i)
ids_m = torch.randint(0, VOCAB, (72,), generator=g)
cases["m72"] = (ids_m, torch.tensor(pos, dtype=torch.int64))

# ---------------------------------------------------------------- runs
captures = {}


def hook(k):
    def fn(_m, _inp, out):
        captures[k] = (out[0] if isinstance(out, tuple) else out).detach()
    return fn


handles = [layer.register_forward_hook(hook(i + 1)) for i, layer in enumerate(model.layers)]


inv_freq_f32 = rot.inv_freq.detach().clone()


def cast(dtype):
    model.to(dtype)
    rot.inv_freq = inv_freq_f32.clone()
    if hasattr(rot, "original_inv_freq"):
        rot.original_inv_freq = rot.inv_freq


def run(dtype, attn, ids, positions):
    model.config._attn_implementation = attn
    captures.clear()
    with torch.no_grad():
        model(input_ids=ids[None].to(dev), position_ids=positions[:, None, :].to(dev), use_cache=False)
    return {k: captures[k][0].to(torch.float64).cpu() for k in STATES}


tensors = {}
results = {}
cast(torch.float64)
for c, (ids, positions) in cases.items():
    results[(c, "f64")] = run(torch.float64, "eager", ids, positions)
    tensors[f"{c}.input_ids"] = ids.clone()
    tensors[f"{c}.position_ids"] = positions.contiguous().clone()
    for k in STATES:
        tensors[f"{c}.output.f64.hidden_states.{k}"] = results[(c, "f64")][k].to(torch.float32).contiguous()
cast(torch.float32)  # exact: every weight is an f32 value
for c, (ids, positions) in cases.items():
    results[(c, "f32")] = run(torch.float32, "sdpa", ids, positions)
cast(torch.bfloat16)  # round to nearest even, as the engine converts on the GPU
for c, (ids, positions) in cases.items():
    results[(c, "bf16")] = run(torch.bfloat16, "sdpa", ids, positions)
for h in handles:
    h.remove()

errors = {"bf16": {}, "f32": {}}
for (c, prec), states in results.items():
    if prec == "f64":
        continue
    for k, v in states.items():
        ref = results[(c, "f64")][k]
        err = ((v - ref).norm() / ref.norm()).item()
        errors[prec][f"{c}.hidden_states.{k}"] = err
        print(f"{prec} vs f64 {c} hidden_states.{k}: rel_l2 {err:.3e}")

# ---------------------------------------------------------------- the mini tower's bf16 error (optional)
mini_errors = {}
if MINI:
    del model
    torch.cuda.empty_cache()
    from safetensors import safe_open
    with safe_open(MINI, "pt") as f:
        mini_meta = f.metadata()
        mini = {k: f.get_tensor(k) for k in f.keys()}
    mc = json.loads(mini_meta["config"])
    keep = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps",
            "rope_parameters", "attention_bias")
    mcfg = Qwen3VLTextConfig(**{k: mc[k] for k in keep if k in mc})
    mcfg._attn_implementation = "sdpa"
    with torch.device(dev):
        mmodel = mq.Qwen3VLTextModel(mcfg)
    mmodel.eval()
    with torch.no_grad():
        for name, p in mmodel.named_parameters():
            p.copy_(mini["weight." + name].to(p.dtype))
    mrot = mmodel.rotary_emb
    minv = mrot.inv_freq.detach().clone()
    mmodel.to(torch.bfloat16)
    mrot.inv_freq = minv
    if hasattr(mrot, "original_inv_freq"):
        mrot.original_inv_freq = mrot.inv_freq
    mcap = {}
    mh = [layer.register_forward_hook(
        lambda _m, _i, out, k=i + 1: mcap.__setitem__(k, (out[0] if isinstance(out, tuple) else out).detach()))
        for i, layer in enumerate(mmodel.layers)]
    for case in sorted({k.split(".")[0] for k in mini if k.endswith(".input_ids")}):
        ids = mini[f"{case}.input_ids"].to(torch.int64).view(1, -1).to(dev)
        mcap.clear()
        with torch.no_grad():
            last = mmodel(input_ids=ids, use_cache=False).last_hidden_state[0]
        for name in [k for k in mini if k.startswith(case + ".") and not k.endswith("input_ids")]:
            what = name[len(case) + 1:]
            got = last if what == "last_hidden_state_normed" else mcap[int(what.rsplit("_", 1)[1])][0]
            ref = mini[name].double().view(got.shape)
            err = ((got.double().cpu() - ref).norm() / ref.norm()).item()
            mini_errors[name] = err
            print(f"mini bf16 vs f64 {name}: rel_l2 {err:.3e}")
    for h in mh:
        h.remove()

config = {k: v for k, v in text_cfg.items() if k != "rope_scaling"}
meta = {
    "format": "qwen3vl-text-procedural/1",
    "config": json.dumps(config),
    "weights": json.dumps({"formula": "shared/golden/README.md procedural weights", "seed": SEED,
                           "names": "Qwen3VLTextModel keys (embed_tokens.weight, layers.N.*, norm.weight)",
                           "layers": LAYERS, "vocab_rows": VOCAB}),
    "states": json.dumps(STATES),
    "reference_rel_l2_vs_f64": json.dumps(errors),
    "mini_bf16_rel_l2_vs_f64": json.dumps(mini_errors),
    "torch": torch.__version__,
    "transformers": transformers.__version__,
    "gpu": torch.cuda.get_device_name(0),
    "notes": ("hidden_states.K = output of decoder layer K-1 (forward hook), f64 run rounded to f32; bf16/f32: "
              "transformers' own runs (SDPA), errors only"),
}
save_file({k: v.contiguous().clone() for k, v in tensors.items()}, OUT, metadata=meta)
print(f"wrote {OUT}: {len(tensors)} tensors in {time.time() - t_start:.1f} s")
