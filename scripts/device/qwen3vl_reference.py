"""Shared by the scripts that make the Qwen3-VL reference files from transformers on the device machine
(make_qwen3vl_text_golden.py, make_qwen3vl_vision_golden.py): one clear line and exit 2 on any failure, the imports of
the reference stack, and a config built across transformers versions that spell the rotary settings differently."""
import sys


def die(msg):
    print("ERROR: " + msg, file=sys.stderr)
    sys.exit(2)


def import_reference(config_class):
    """torch, transformers, its Qwen3-VL modeling module, the Qwen3-VL configuration class named `config_class` and
    safetensors' save_file; dies naming what does not import."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        die(f"torch is not importable: {e}")
    try:
        import transformers
        from transformers.models.qwen3_vl import configuration_qwen3_vl
        from transformers.models.qwen3_vl import modeling_qwen3_vl
        config = getattr(configuration_qwen3_vl, config_class)
    except Exception as e:  # noqa: BLE001
        die(f"transformers with Qwen3-VL is not importable ({e}); need transformers >= 4.57")
    try:
        from safetensors.torch import save_file
    except Exception as e:  # noqa: BLE001
        die(f"safetensors is not importable: {e}")
    return torch, transformers, modeling_qwen3_vl, config, save_file


def config_with_rope_fallbacks(build, text_cfg, what):
    """build(text config) with every key of text_cfg, else without those this transformers version refuses
    (rope_scaling; rope_parameters; rope_parameters and rope_theta): the first form `what` accepts. Dies when none."""
    last = None
    for drop in ([], ["rope_scaling"], ["rope_parameters"], ["rope_parameters", "rope_theta"]):
        tc = {k: v for k, v in text_cfg.items() if k not in drop}
        try:
            return build(tc)
        except Exception as e:  # noqa: BLE001
            last = e
            print(f"note: {what} refused the text config without {drop}: {e}")
    die(f"cannot build a {what}: {last}")
