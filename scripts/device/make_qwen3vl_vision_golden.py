#!/usr/bin/env python3
# Reference tensors for the Qwen3-VL vision tower, its preprocessing and the DeepStack/mRoPE hand-off into the text
# decoder, from transformers' own Qwen3VLModel on small random weights (no network: the model is built from a
# config). Run on the device machine, where torch and transformers are installed:
#
#     python3 scripts/device/make_qwen3vl_vision_golden.py OUT.safetensors
#
# and copy OUT.safetensors to .gpu/golden/qwen3vl-vision-mini.safetensors; `h3 verify` then checks it.
#
# Naming (as in ../shared/golden/README.md): `weight.<transformers key of Qwen3VLModel>` (f32, the exact values
# both runs use), `<case>.input.<name>`, `<case>.output.<precision>.<name>`. Cases:
#   vl       two images (no resize needed) + one 4-frame video inside a prompt: pixel_values, grid_thw,
#            input_ids, position_ids (get_rope_index), image/video embeds, deepstack features, and the text
#            decoder's states: hidden_states.K as transformers records them (K = 0: embeddings after the vision
#            rows are scattered in; K >= 1: decoder layer K-1's output before the DeepStack addition) and
#            layer_input.K = what decoder layer K (or the final norm) receives, i.e. after the addition.
#   preproc  one uint8 image that needs a smart resize, run through transformers' Qwen2-VL image processor
#            (when it can be constructed offline): pixel_values and image_grid_thw.
# Runs on the CPU in f64 and f32 (deterministic, no TF32); then, on a GPU, transformers' own bf16 run, whose error
# against f64 is stored per output (metadata reference_rel_l2_vs_f64) as the bound of the engine's bf16 path.
import json
import math
import sys
import traceback

from qwen3vl_reference import config_with_rope_fallbacks, die, import_reference

if len(sys.argv) != 2:
    die("usage: make_qwen3vl_vision_golden.py OUT.safetensors")
OUT = sys.argv[1]

torch, transformers, mq, Qwen3VLConfig, save_file = import_reference("Qwen3VLConfig")

print("torch", torch.__version__, "transformers", transformers.__version__)
torch.manual_seed(20260417)
torch.set_num_threads(max(1, min(16, torch.get_num_threads())))
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

# ---------------------------------------------------------------- config
VOCAB = 320
IDS = dict(vision_start_token_id=300, vision_end_token_id=301, image_token_id=302, video_token_id=303)
vision_cfg = dict(
    depth=4,
    hidden_size=64,
    hidden_act="gelu_pytorch_tanh",
    intermediate_size=96,
    num_heads=4,
    in_channels=3,
    patch_size=16,
    spatial_merge_size=2,
    temporal_patch_size=2,
    out_hidden_size=48,
    num_position_embeddings=36,  # a 6 x 6 learned grid, interpolated to each image's patch grid
    deepstack_visual_indexes=[0, 1, 3],
)
MROPE = [2, 2, 2]  # head_dim 12 -> 6 frequencies
text_cfg = dict(
    vocab_size=VOCAB,
    hidden_size=48,
    intermediate_size=80,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=12,
    hidden_act="silu",
    rms_norm_eps=1e-6,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
    rope_theta=5000000.0,
    rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": MROPE,
                     "mrope_interleaved": True},
    rope_scaling={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": MROPE, "mrope_interleaved": True},
)


cfg = config_with_rope_fallbacks(lambda tc: Qwen3VLConfig(text_config=tc, vision_config=dict(vision_cfg), **IDS),
                                 text_cfg, "Qwen3VLConfig")
for sub in (cfg, cfg.vision_config, cfg.text_config):
    for attr in ("_attn_implementation", "attn_implementation"):
        try:
            setattr(sub, attr, "eager")
        except Exception:  # noqa: BLE001
            pass
try:
    model = mq.Qwen3VLModel(cfg)
except Exception as e:  # noqa: BLE001
    traceback.print_exc()
    die(f"cannot build Qwen3VLModel: {e}")
model.eval()
# What the built model really uses (config plumbing differs between versions): read it back from the rotary
# module and store that in the metadata, so the engine is configured like the reference that ran.
rot = model.language_model.rotary_emb
inv = rot.inv_freq.double()
eff_theta = float(inv[1] ** (-text_cfg["head_dim"] / 2.0)) if inv.numel() > 1 else text_cfg["rope_theta"]
eff_theta = float(round(eff_theta, -2)) if abs(eff_theta - round(eff_theta, -2)) < 1e-3 * eff_theta else eff_theta
eff_section = list(getattr(rot, "mrope_section", MROPE))
print(f"model text rope: theta ~{eff_theta}, mrope_section {eff_section}")
if abs(eff_theta - 5000000.0) > 1.0 or eff_section != MROPE:
    print("WARNING: the model did not take the intended rope settings; the metadata records what it uses")
text_cfg["rope_theta"] = eff_theta
text_cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": eff_theta, "mrope_section": eff_section,
                               "mrope_interleaved": True}
text_cfg.pop("rope_scaling", None)

# Random weights with useful magnitudes (the library's init leaves norms at 1 and biases at 0, which hides bugs).
gen = torch.Generator().manual_seed(7)
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.endswith("embed_tokens.weight"):
            v = torch.randn(p.shape, generator=gen)
        elif name.endswith("pos_embed.weight"):
            v = 0.5 * torch.randn(p.shape, generator=gen)
        elif p.ndim >= 2:
            fan_in = p[0].numel()
            v = torch.randn(p.shape, generator=gen) / math.sqrt(fan_in)
        elif "norm" in name and name.endswith("weight"):
            v = 1.0 + 0.1 * torch.randn(p.shape, generator=gen)
        else:
            v = 0.05 * torch.randn(p.shape, generator=gen)
        p.copy_(v.to(p.dtype))
weights = {"weight." + k: v.detach().float().contiguous().clone() for k, v in model.state_dict().items()}
print(f"{len(weights)} weight tensors")

# ---------------------------------------------------------------- inputs (no resize: sizes are multiples of 32)
P, TP, M = 16, 2, 2
MEAN = STD = 0.5


def synthetic_image(h, w, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (h, w, 3), generator=g, dtype=torch.uint8)


def patchify(frames_u8):
    """frames [F, H, W, 3] uint8 -> rows [grid_t*gh*gw, 3*TP*P*P] f64 in the processor's order, and (t, h, w)."""
    x = frames_u8.to(torch.float64).permute(0, 3, 1, 2)  # F, C, H, W
    x = (x * (1.0 / 255.0) - MEAN) / STD
    if x.shape[0] % TP:
        x = torch.cat([x, x[-1:].expand(TP - x.shape[0] % TP, -1, -1, -1)], 0)
    f, c, h, w = x.shape
    gt, gh, gw = f // TP, h // P, w // P
    x = x.reshape(gt, TP, c, gh // M, M, P, gw // M, M, P)
    x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8).reshape(gt * gh * gw, c * TP * P * P)
    return x.contiguous(), (gt, gh, gw)


img0 = synthetic_image(64, 96, 1)  # grid 1 x 4 x 6 -> 6 tokens
img1 = synthetic_image(96, 64, 2)  # grid 1 x 6 x 4 -> 6 tokens
vid = torch.stack([synthetic_image(32, 64, 10 + i) for i in range(4)])  # grid 2 x 2 x 4 -> 2 frames x 2 tokens
pv0, g0 = patchify(img0[None])
pv1, g1 = patchify(img1[None])
pvv, gv = patchify(vid)
pixel_values = torch.cat([pv0, pv1], 0)
image_grid_thw = torch.tensor([g0, g1], dtype=torch.int64)
pixel_values_videos = pvv
video_grid_thw = torch.tensor([gv], dtype=torch.int64)

# Prompt: random text ids < 300 standing in for words; "<Picture i>: " style labels are plain text ids here.
# Video frames are preceded by their timestamp text (random ids), as the Qwen3-VL processor lays them out.
g = torch.Generator().manual_seed(3)


def words(n):
    return torch.randint(0, 300, (n,), generator=g).tolist()


def vblock(tok, n):
    return [IDS["vision_start_token_id"]] + [tok] * n + [IDS["vision_end_token_id"]]


n_img = [int(t * h * w) // (M * M) for t, h, w in image_grid_thw.tolist()]
frame_tokens = int(gv[1] * gv[2]) // (M * M)
ids = words(3) + vblock(IDS["image_token_id"], n_img[0]) + words(2) + vblock(IDS["image_token_id"], n_img[1])
ids += words(2)
for fi in range(gv[0]):
    ids += words(3) + vblock(IDS["video_token_id"], frame_tokens)
ids += words(5)
input_ids = torch.tensor([ids], dtype=torch.int64)
print("prompt length", len(ids), "image tokens", n_img, "video frame tokens", frame_tokens, "x", gv[0])

# mm_token_type_ids (0 text, 1 image, 2 video): newer transformers take it in get_rope_index / forward.
mm_types = torch.zeros_like(input_ids)
mm_types[input_ids == IDS["image_token_id"]] = 1
mm_types[input_ids == IDS["video_token_id"]] = 2


def own_rope_index():
    """The documented rule, used only when the library call fails: text runs advance by one per token; a vision
    block of (h, w) merged tokens starts at the next free index s and gets (s, s + row, s + col); the next text
    starts at max + 1. Video frames are separate blocks (t = 1 each; their time is the timestamp text)."""
    pos, nxt, i = [[], [], []], 0, 0
    grids = [(int(h) // M, int(w) // M) for _, h, w in image_grid_thw.tolist()]
    vgrids = []
    for t, h, w in video_grid_thw.tolist():
        vgrids += [(int(h) // M, int(w) // M)] * int(t)
    gi = vi = 0
    while i < len(ids):
        if ids[i] in (IDS["image_token_id"], IDS["video_token_id"]):
            if ids[i] == IDS["image_token_id"]:
                hh, ww = grids[gi]; gi += 1
            else:
                hh, ww = vgrids[vi]; vi += 1
            for r in range(hh):
                for c in range(ww):
                    pos[0].append(nxt); pos[1].append(nxt + r); pos[2].append(nxt + c)
            nxt += max(hh, ww)
            i += hh * ww
        else:
            for a in range(3):
                pos[a].append(nxt)
            nxt += 1
            i += 1
    return torch.tensor(pos, dtype=torch.int64)[:, None, :]


position_ids_source = "model.get_rope_index"
position_ids = None
for attempt in (lambda: model.get_rope_index(input_ids, image_grid_thw, video_grid_thw),
                lambda: model.get_rope_index(input_ids=input_ids, image_grid_thw=image_grid_thw,
                                             video_grid_thw=video_grid_thw, attention_mask=None),
                lambda: model.get_rope_index(input_ids=input_ids, mm_token_type_ids=mm_types,
                                             image_grid_thw=image_grid_thw, video_grid_thw=video_grid_thw,
                                             attention_mask=None)):
    try:
        position_ids = attempt()[0]
        break
    except Exception as e:  # noqa: BLE001
        print("note: get_rope_index call form failed:", e)
if position_ids is None:
    print("WARNING: model.get_rope_index failed in every form; using this script's own rule (flagged in metadata)")
    position_ids = own_rope_index()
    position_ids_source = "script fallback"
print("position_ids", tuple(position_ids.shape))

# ---------------------------------------------------------------- runs
captures = {}


def hook_out(name):
    def fn(_m, _inp, out):
        captures.setdefault(name, []).append(out[0] if isinstance(out, tuple) else out)
    return fn


def hook_in(name):
    def fn(_m, args, kwargs=None):
        x = args[0] if args else (kwargs or {}).get("hidden_states")
        captures.setdefault(name, []).append(x)
    return fn


vis = model.visual
handles = [vis.merger.register_forward_hook(hook_out("merger"))]
for i, mod in enumerate(vis.deepstack_merger_list):
    handles.append(mod.register_forward_hook(hook_out(f"deepstack.{i}")))
for i, blk in enumerate(vis.blocks):
    handles.append(blk.register_forward_hook(hook_out(f"block.{i}")))
lm = model.language_model
for i, layer in enumerate(lm.layers):
    handles.append(layer.register_forward_hook(hook_out(f"out.{i + 1}")))
for i, layer in enumerate(lm.layers):
    try:
        handles.append(layer.register_forward_pre_hook(hook_in(f"hs.{i}"), with_kwargs=True))
    except TypeError:
        handles.append(layer.register_forward_pre_hook(lambda m, a, i=i: hook_in(f"hs.{i}")(m, a)))
handles.append(lm.norm.register_forward_pre_hook(lambda m, a: captures.setdefault(
    f"hs.{len(lm.layers)}", []).append(a[0])))

tensors = dict(weights)
case = "vl"
tensors[f"{case}.input.pixel_values"] = pixel_values
tensors[f"{case}.input.image_grid_thw"] = image_grid_thw
tensors[f"{case}.input.pixel_values_videos"] = pixel_values_videos
tensors[f"{case}.input.video_grid_thw"] = video_grid_thw
tensors[f"{case}.input.input_ids"] = input_ids[0].clone()
tensors[f"{case}.input.position_ids"] = position_ids[:, 0, :].contiguous()
tensors[f"{case}.input.image0"] = img0
tensors[f"{case}.input.image1"] = img1
tensors[f"{case}.input.video"] = vid

for prec, dt in (("f64", torch.float64), ("f32", torch.float32)):
    model.to(dt)
    captures.clear()
    with torch.no_grad():
        try:
            args = dict(input_ids=input_ids, pixel_values=pixel_values.to(dt), image_grid_thw=image_grid_thw,
                        pixel_values_videos=pixel_values_videos.to(dt), video_grid_thw=video_grid_thw,
                        position_ids=position_ids)
            try:
                model(**args)
            except TypeError as e:
                print("note: forward without mm_token_type_ids failed, retrying with it:", e)
                captures.clear()
                model(**args, mm_token_type_ids=mm_types)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            die(f"Qwen3VLModel forward failed in {prec}: {e}")
    # Visual calls in order: images first, then the video (Qwen3VLModel.forward's order).
    n_calls = len(captures.get("merger", []))
    if n_calls != 2:
        die(f"expected 2 vision calls (images, video), captured {n_calls}")
    out = f"{case}.output.{prec}."
    for which, k in (("image", 0), ("video", 1)):
        tensors[out + f"{which}_embeds"] = captures["merger"][k].detach().to(torch.float64).contiguous()
        for i in range(len(vis.deepstack_merger_list)):
            tensors[out + f"{which}_deepstack.{i}"] = (
                captures[f"deepstack.{i}"][k].detach().to(torch.float64).contiguous())
        for i in range(len(vis.blocks)):
            tensors[f"{case}.act.{prec}.{which}.block.{i}"] = (
                captures[f"block.{i}"][k].detach().to(torch.float64).contiguous())
    for i in range(len(lm.layers) + 1):
        hs = captures[f"hs.{i}"][0]
        tensors[out + f"layer_input.{i}"] = hs.detach()[0].to(torch.float64).contiguous()
        # transformers' hidden_states[i]: the embeddings (i = 0) or decoder layer i-1's output as the layer
        # returned it, before any DeepStack addition.
        rec = hs if i == 0 else captures[f"out.{i}"][0]
        tensors[out + f"hidden_states.{i}"] = rec.detach()[0].to(torch.float64).contiguous()
    print(prec, "image_embeds", tuple(tensors[out + "image_embeds"].shape),
          "video_embeds", tuple(tensors[out + "video_embeds"].shape))

# transformers' own bf16 run on the GPU (when there is one): only its error against f64 is kept, per output, as the
# bound of the engine's bf16 path (1.5x). The rotary inv_freq buffers stay f32, as from_pretrained(dtype=bfloat16)
# leaves them (model.to() would round them to bf16).
bf16_errors = {}
if torch.cuda.is_available():
    inv_freqs = {name: b.detach().clone() for name, b in model.named_buffers() if name.endswith("inv_freq")}
    model.to(device="cuda", dtype=torch.bfloat16)
    for name, b in inv_freqs.items():
        mod = model.get_submodule(name.rsplit(".", 1)[0])
        setattr(mod, "inv_freq", b.to(device="cuda", dtype=torch.float32))
        if hasattr(mod, "original_inv_freq"):
            mod.original_inv_freq = mod.inv_freq
    for sub in (cfg, cfg.vision_config, cfg.text_config):
        try:
            sub._attn_implementation = "sdpa"
        except Exception:  # noqa: BLE001
            pass
    captures.clear()
    with torch.no_grad():
        args = dict(input_ids=input_ids.cuda(), pixel_values=pixel_values.to("cuda", torch.bfloat16),
                    image_grid_thw=image_grid_thw.cuda(),
                    pixel_values_videos=pixel_values_videos.to("cuda", torch.bfloat16),
                    video_grid_thw=video_grid_thw.cuda(), position_ids=position_ids.cuda())
        try:
            model(**args)
        except TypeError as e:
            print("note: forward without mm_token_type_ids failed, retrying with it:", e)
            captures.clear()
            model(**args, mm_token_type_ids=mm_types.cuda())
    got = {}
    for which, k in (("image", 0), ("video", 1)):
        got[f"{which}_embeds"] = captures["merger"][k]
        for i in range(len(vis.deepstack_merger_list)):
            got[f"{which}_deepstack.{i}"] = captures[f"deepstack.{i}"][k]
    for i in range(len(lm.layers) + 1):
        got[f"hidden_states.{i}"] = (captures[f"hs.{i}"][0] if i == 0 else captures[f"out.{i}"][0])[0]
    for name, v in got.items():
        ref = tensors["vl.output.f64." + name]
        err = ((v.detach().double().cpu() - ref).norm() / ref.norm()).item()
        bf16_errors[name] = err
        print(f"bf16 (cuda) vs f64 {name}: rel_l2 {err:.3e}")
else:
    print("WARNING: no CUDA device: no bf16 run, the file carries no bf16 bound")

for h in handles:
    h.remove()
for name in [k for k in tensors if k.startswith("vl.output.f32.")]:
    ref = tensors[name.replace(".f32.", ".f64.")]
    err = (tensors[name] - ref).norm() / ref.norm()
    print(f"f32 vs f64 {name[len('vl.output.f32.'):]}: rel_l2 {err:.3e}")

# ---------------------------------------------------------------- preprocessing case (smart resize)
meta_pre = {"status": "not run"}
pre_img = synthetic_image(45, 83, 5)  # 45 x 83 -> smart_resize(factor 32, these limits) -> 32 x 96
MIN_PX, MAX_PX = 32 * 32 * 2, 64 * 128
tensors["preproc.input.image"] = pre_img
try:
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    kwargs = dict(do_resize=True, do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                  image_mean=[MEAN] * 3, image_std=[STD] * 3, do_convert_rgb=True, patch_size=P,
                  temporal_patch_size=TP, merge_size=M)
    proc = None
    for extra in (dict(size={"shortest_edge": MIN_PX, "longest_edge": MAX_PX}),
                  dict(min_pixels=MIN_PX, max_pixels=MAX_PX)):
        try:
            proc = Qwen2VLImageProcessor(**kwargs, **extra)
            break
        except Exception as e:  # noqa: BLE001
            print("note: Qwen2VLImageProcessor refused", list(extra), e)
    if proc is None:
        raise RuntimeError("no constructor form accepted")
    import numpy as np
    res = proc(images=[pre_img.numpy()], return_tensors="pt")
    tensors["preproc.output.pixel_values"] = torch.as_tensor(res["pixel_values"]).to(torch.float64).contiguous()
    tensors["preproc.output.image_grid_thw"] = torch.as_tensor(res["image_grid_thw"]).to(torch.int64).contiguous()
    meta_pre = {"status": "ok", "processor": type(proc).__name__, "resample": str(getattr(proc, "resample", "?")),
                "min_pixels": MIN_PX, "max_pixels": MAX_PX}
    print("preproc grid", res["image_grid_thw"].tolist())
    # The no-resize images of the vl case through the same processor must equal this script's patchify.
    res0 = proc(images=[img0.numpy()], return_tensors="pt")
    d = (torch.as_tensor(res0["pixel_values"]).double() - pv0).abs().max().item()
    print(f"processor vs script patchify (64x96, no resize): max |diff| {d:.3e}")
    meta_pre["noresize_max_abs_vs_script"] = d
except Exception as e:  # noqa: BLE001
    traceback.print_exc()
    print(f"WARNING: the image processor case was skipped: {e}")
    meta_pre = {"status": f"skipped: {e}"}

meta = {
    "format": "qwen3vl-vision-golden/1",
    "config": json.dumps({"vision_config": vision_cfg, "text_config": text_cfg, **IDS}),
    "torch": torch.__version__,
    "position_ids_source": position_ids_source,
    "transformers": transformers.__version__,
    "preprocess": json.dumps({"patch_size": P, "temporal_patch_size": TP, "merge_size": M, "image_mean": MEAN,
                              "image_std": STD, **meta_pre}),
    "reference_rel_l2_vs_f64": json.dumps({"bf16": bf16_errors}),
    "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
    "notes": ("hidden_states.K = transformers' record (pre-DeepStack), layer_input.K = input of layer K (post); "
              "weights stored f32 and used exactly by both runs; pixel values f64 (f32 run casts)"),
}
save_file({k: v.contiguous().clone() for k, v in tensors.items()}, OUT, metadata=meta)  # clone: no shared storage
print(f"wrote {OUT}: {len(tensors)} tensors")
