"""Drill model -> HF tensor names and config.json for the three families drills can write.

The drill is a *writer* of these layouts (it plays the training framework), so it has to know the
names; the reader side keeps its own knowledge in ``ckptscan/layouts``.  Names are the exact ones of
transformers' ``LlamaForCausalLM``, ``MixtralForCausalLM`` and ``Qwen2MoeForCausalLM``.
"""

from __future__ import annotations

import torch

from .model import TinyLM

NAMINGS = ("llama", "mixtral", "qwen2_moe")
_EXPERT = {
    "mixtral": ("block_sparse_moe.gate.weight", "block_sparse_moe.experts.{e}.", ("w1", "w3", "w2")),
    "qwen2_moe": ("mlp.gate.weight", "mlp.experts.{e}.", ("gate_proj", "up_proj", "down_proj")),
}


def hf_state_dict(model: TinyLM, naming: str) -> dict[str, torch.Tensor]:
    """Detached float32 tensors under HF names (contiguous, ready for safetensors)."""
    cfg = model.cfg
    if naming == "llama" and cfg.moe:
        raise ValueError("llama naming is dense; use mixtral or qwen2_moe for an MoE drill")
    if naming != "llama" and not cfg.moe:
        raise ValueError(f"{naming} naming needs an MoE model (n_experts > 0)")
    return {
        hf_name(name, naming): t.detach().float().contiguous().clone()
        for name, t in model.state_dict().items()
    }


def hf_name(name: str, naming: str) -> str:
    """The HF name under ``naming`` of one drill-model parameter name (``model.state_dict()`` keys)."""
    if ".mlp." not in name or naming == "llama":
        return name
    prefix, rest = name.split(".mlp.", 1)
    router, expert_prefix, (g, u, d) = _EXPERT[naming]
    if rest == "router.weight":
        return f"{prefix}.{router}"
    _, e, proj, _w = rest.split(".")  # experts.{e}.{gate_proj|up_proj|down_proj}.weight
    short = {"gate_proj": g, "up_proj": u, "down_proj": d}[proj]
    return f"{prefix}.{expert_prefix.format(e=e)}{short}.weight"


def config_json(cfg, naming: str, dtype: str) -> dict:
    """An HF-style config.json for the drill model under ``naming``."""
    base = {
        "vocab_size": cfg.vocab,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_seq,
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_theta,
        "tie_word_embeddings": False,
        "torch_dtype": dtype,
        "attention_bias": False,
    }
    if naming == "llama":
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "intermediate_size": cfg.ffn,
            **base,
        }
    if naming == "mixtral":
        return {
            "architectures": ["MixtralForCausalLM"],
            "model_type": "mixtral",
            "intermediate_size": cfg.ffn,
            "num_local_experts": cfg.n_experts,
            "num_experts_per_tok": cfg.top_k,
            "router_aux_loss_coef": 0.01,
            **base,
        }
    # Qwen2-MoE: no shared expert in the drill model (width 0); all layers sparse.
    return {
        "architectures": ["Qwen2MoeForCausalLM"],
        "model_type": "qwen2_moe",
        "intermediate_size": cfg.ffn,
        "moe_intermediate_size": cfg.ffn,
        "shared_expert_intermediate_size": 0,
        "num_experts": cfg.n_experts,
        "num_experts_per_tok": cfg.top_k,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "router_aux_loss_coef": 0.01,
        **base,
    }
