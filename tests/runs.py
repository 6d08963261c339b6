"""Synthetic training runs in the real on-disk formats, for pipeline tests.

Weights follow a random walk so the increments are well defined; names follow Hugging Face llama /
mixtral conventions.  Every run is written under a pytest tmp_path.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
from safetensors.torch import save_file

TINY = {"layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 8, "hidden": 32, "experts": 4}


def state_dict(g: torch.Generator, moe: bool, c=TINY) -> dict[str, torch.Tensor]:
    L, H, G, h, d, E = c["layers"], c["heads"], c["kv_heads"], c["head_dim"], c["hidden"], c["experts"]
    sd = {"model.embed_tokens.weight": torch.randn(64, d, generator=g), "model.norm.weight": torch.ones(d)}
    for i in range(L):
        p = f"model.layers.{i}."
        sd[p + "self_attn.q_proj.weight"] = torch.randn(H * h, d, generator=g) / d**0.5
        sd[p + "self_attn.k_proj.weight"] = torch.randn(G * h, d, generator=g) / d**0.5
        sd[p + "self_attn.v_proj.weight"] = torch.randn(G * h, d, generator=g) / d**0.5
        sd[p + "self_attn.o_proj.weight"] = torch.randn(d, H * h, generator=g) / d**0.5
        sd[p + "input_layernorm.weight"] = torch.ones(d)
        if moe:
            sd[p + "block_sparse_moe.gate.weight"] = torch.randn(E, d, generator=g) / d**0.5
            for e in range(E):
                sd[p + f"block_sparse_moe.experts.{e}.w1.weight"] = (
                    torch.randn(2 * d, d, generator=g) / d**0.5
                )
        else:
            sd[p + "mlp.gate_proj.weight"] = torch.randn(2 * d, d, generator=g) / d**0.5
    return sd


def config(moe: bool, c=TINY) -> dict:
    cfg = {
        "model_type": "mixtral" if moe else "llama",
        "architectures": ["MixtralForCausalLM" if moe else "LlamaForCausalLM"],
        "hidden_size": c["hidden"],
        "num_attention_heads": c["heads"],
        "num_key_value_heads": c["kv_heads"],
        "head_dim": c["head_dim"],
        "num_hidden_layers": c["layers"],
        "rope_theta": 10000.0,
    }
    if moe:
        cfg.update(num_local_experts=c["experts"], num_experts_per_tok=2)
    return cfg


def write_checkpoint(folder: Path, sd: dict, fmt: str, dtype=torch.float32) -> None:
    folder.mkdir(parents=True)
    sd = {k: v.to(dtype).contiguous() for k, v in sd.items()}
    if fmt == "safetensors":
        save_file(sd, folder / "model.safetensors")
    elif fmt == "sharded":
        names = sorted(sd)
        half = len(names) // 2
        shards = {
            "model-00001-of-00002.safetensors": names[:half],
            "model-00002-of-00002.safetensors": names[half:],
        }
        wm = {}
        for fname, keys in shards.items():
            save_file({k: sd[k] for k in keys}, folder / fname)
            wm.update({k: fname for k in keys})
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    elif fmt == "torch":
        torch.save(sd, folder / "pytorch_model.bin")
    elif fmt == "dcp":
        import torch.distributed.checkpoint as dcp

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save(sd, checkpoint_id=str(folder), no_dist=True)
    else:
        raise ValueError(fmt)


def make_run(
    root: Path,
    fmt: str = "safetensors",
    n: int = 4,
    every: int = 100,
    moe: bool = False,
    seed: int = 0,
    step_size: float = 0.02,
    name: str = "checkpoint-{step}",
    dtype=torch.float32,
    c: dict = TINY,
) -> Path:
    g = torch.Generator().manual_seed(seed)
    sd = state_dict(g, moe, c)
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config(moe, c)))
    for i in range(n):
        step = (i + 1) * every
        write_checkpoint(root / name.format(step=step), sd, fmt, dtype)
        sd = {
            k: v + step_size * torch.randn(v.shape, generator=g) / v.shape[-1] ** 0.5 for k, v in sd.items()
        }
    return root
