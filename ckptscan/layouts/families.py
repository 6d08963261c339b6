"""The registry of known architectures: each family is data, not code.

A family names, per *role*, the template of the tensor that plays it.  ``{L}`` stands for the layer
index; a template without ``{L}`` is a tensor stacked over layers (layer = leading axis, Megatron
torch_dist).  Anything before the template is a free prefix (``model.``, ``module.``, ``_orig_mod.``,
``transformer.``, Lightning's extra ``model.``...), the same prefix for every role of a model.
Several templates for one role are alternatives (e.g. Mixtral before/after transformers v5).

Attention kinds (how q/k are stored; see ``splitters.py``):
  ``separate``   q and k projections apart                      roles q, k [, q_norm, k_norm]
  ``qkv``        one fused projection, split by ``qkv_order``   role qkv [, q_norm, k_norm]
  ``falcon``     fused; the order depends on the config flags   role qkv
  ``mla``        DeepSeek multi-head latent attention           roles q_a, q_a_norm, q_b | q, kv_a,
                                                                kv_a_norm, kv_b
Router roles: ``router`` ([E, d], or [E*d] when ``router_flat``) and ``router_bias`` ([E]).
Projection role: ``out``, the attention output projection (optional: only its update ratio is read).

To add an architecture, add one ``Family`` here and a test in tests/test_layouts.py built from the
names and fusing that the training framework really writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ATTN_ROLES = ("q", "k", "qkv", "q_norm", "k_norm", "q_a", "q_a_norm", "q_b", "kv_a", "kv_a_norm", "kv_b")
ROUTER_ROLES = ("router", "router_bias")
# a layer's attention output projection ([d, H*h], or [H*h, d] for GPT-2's Conv1D): read for its
# step size (``out.update_ratio``), which the low-precision attention fault does not distort
PROJ_ROLES = ("out",)
QKV_ORDERS = ("contiguous", "per_head", "per_group")


@dataclass(frozen=True)
class Family:
    name: str
    attn: str  # "separate" | "qkv" | "falcon" | "mla"
    roles: dict[str, tuple[str, ...]]
    required: tuple[str, ...]  # roles that must all be present for the family to match
    model_types: tuple[str, ...] = ()  # config model_type / architectures hints (lower case)
    qkv_order: str | None = None
    transposed: bool = False  # Conv1D weights stored [in, out] (GPT-2)
    routing: str = "softmax_topk"  # rule when no router bias is stored
    routing_with_bias: str = "sigmoid_bias"  # rule when a router bias is stored
    router_flat: bool = False
    uses_rope: bool = True
    norm_offset: float = 0.0  # Gemma: norm multiplies by (1 + weight)
    doc: str = ""
    notes: tuple[str, ...] = ()
    patterns: dict[str, tuple[re.Pattern, ...]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        compiled = {role: tuple(template_regex(t) for t in ts) for role, ts in self.roles.items()}
        object.__setattr__(self, "patterns", compiled)


def template_regex(template: str) -> re.Pattern:
    """``layers.{L}.self_attn.q_proj.weight`` -> a regex with a free prefix and a ``layer`` group."""
    body = re.escape(template).replace(r"\{L\}", r"(?P<layer>\d+)")
    return re.compile(r"(?P<prefix>(?:[^.]+\.)*?)" + body)


def _r(**roles: str | tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    return {k: (v,) if isinstance(v, str) else tuple(v) for k, v in roles.items()}


_HF_QK = {
    "out": "layers.{L}.self_attn.o_proj.weight",
    "q": "layers.{L}.self_attn.q_proj.weight",
    "k": "layers.{L}.self_attn.k_proj.weight",
    "q_norm": "layers.{L}.self_attn.q_norm.weight",
    "k_norm": "layers.{L}.self_attn.k_norm.weight",
}
_HF_MLA = {
    "out": "layers.{L}.self_attn.o_proj.weight",
    "q": "layers.{L}.self_attn.q_proj.weight",
    "q_a": "layers.{L}.self_attn.q_a_proj.weight",
    "q_a_norm": "layers.{L}.self_attn.q_a_layernorm.weight",
    "q_b": "layers.{L}.self_attn.q_b_proj.weight",
    "kv_a": "layers.{L}.self_attn.kv_a_proj_with_mqa.weight",
    "kv_a_norm": "layers.{L}.self_attn.kv_a_layernorm.weight",
    "kv_b": "layers.{L}.self_attn.kv_b_proj.weight",
}

FAMILIES: tuple[Family, ...] = (
    Family(
        "llama",
        "separate",
        _r(**_HF_QK),
        ("q", "k"),
        model_types=(
            "llama",
            "mistral",
            "qwen2",
            "qwen3",
            "olmo",
            "olmo2",
            "olmo3",
            "gemma",
            "gemma2",
            "granite",
            "phi",
            "starcoder2",
            "cohere",
            "internlm2",
            "smollm3",
            "exaone",
            "llamaforcausallm",
            "mistralforcausallm",
            "qwen2forcausallm",
            "qwen3forcausallm",
        ),
        doc="HF LLaMA / Mistral / Qwen2 / Qwen3 / OLMo-2 (dense); Qwen3 per-head q_norm/k_norm, "
        "OLMo-2 whole-projection q_norm/k_norm",
    ),
    Family(
        "gemma3",
        "separate",
        _r(**_HF_QK),
        ("q", "k"),
        norm_offset=1.0,
        model_types=("gemma3", "gemma3_text", "gemma3forcausallm", "gemma3forconditionalgeneration"),
        doc="HF Gemma-3: like LLaMA, q_norm/k_norm scale by (1 + weight); chosen by config model_type",
    ),
    Family(
        "mixtral",
        "separate",
        _r(**_HF_QK, router="layers.{L}.block_sparse_moe.gate.weight"),
        ("q", "k", "router"),
        model_types=("mixtral", "phimoe", "mixtralforcausallm"),
        doc="HF Mixtral (router block_sparse_moe.gate [E, d])",
    ),
    Family(
        "qwen-moe",
        "separate",
        _r(**_HF_QK, router="layers.{L}.mlp.gate.weight"),
        ("q", "k", "router"),
        model_types=(
            "qwen2_moe",
            "qwen3_moe",
            "olmoe",
            "mixtral",
            "qwen2moeforcausallm",
            "qwen3moeforcausallm",
            "olmoeforcausallm",
        ),
        doc="HF Qwen2-MoE / Qwen3-MoE / OLMoE (router mlp.gate [E, d]; not mlp.shared_expert_gate)",
    ),
    Family(
        "gpt-oss",
        "separate",
        _r(**_HF_QK, router="layers.{L}.mlp.router.weight", router_bias="layers.{L}.mlp.router.bias"),
        ("q", "k", "router"),
        routing="topk_softmax",
        routing_with_bias="topk_softmax",
        model_types=("gpt_oss", "gptossforcausallm"),
        doc="HF GPT-OSS (router mlp.router weight [E, d] + bias [E], top-k then softmax)",
    ),
    Family(
        "deepseek-mla",
        "mla",
        _r(
            **_HF_MLA,
            router="layers.{L}.mlp.gate.weight",
            router_bias="layers.{L}.mlp.gate.e_score_correction_bias",
        ),
        ("kv_a", "kv_b"),
        model_types=(
            "deepseek_v2",
            "deepseek_v3",
            "kimi_k2",
            "deepseekv2forcausallm",
            "deepseekv3forcausallm",
        ),
        doc="HF DeepSeek-V2/V3 MLA (q_a_proj/q_a_layernorm/q_b_proj or q_proj, kv_a_proj_with_mqa, "
        "kv_a_layernorm, kv_b_proj); router mlp.gate [+ e_score_correction_bias on V3]",
    ),
    Family(
        "gpt2",
        "qkv",
        _r(qkv="h.{L}.attn.c_attn.weight", out="h.{L}.attn.c_proj.weight"),
        ("qkv",),
        qkv_order="contiguous",
        transposed=True,
        uses_rope=False,
        model_types=("gpt2", "gpt2lmheadmodel"),
        doc="GPT-2 (Conv1D c_attn stored [d, 3d], q|k|v along the output dim; learned positions)",
    ),
    Family(
        "gpt-neox",
        "qkv",
        _r(qkv="layers.{L}.attention.query_key_value.weight", out="layers.{L}.attention.dense.weight"),
        ("qkv",),
        qkv_order="per_head",
        model_types=("gpt_neox", "gptneoxforcausallm"),
        doc="GPT-NeoX / Pythia (query_key_value [3*H*h, d], per head [q; k; v]; partial rotary)",
    ),
    Family(
        "phi3",
        "qkv",
        _r(qkv="layers.{L}.self_attn.qkv_proj.weight", out="layers.{L}.self_attn.o_proj.weight"),
        ("qkv",),
        qkv_order="contiguous",
        model_types=("phi3", "phi3forcausallm"),
        doc="Phi-3 (qkv_proj [(H + 2G)*h, d], all q rows, then k, then v)",
    ),
    Family(
        "falcon",
        "falcon",
        _r(qkv="h.{L}.self_attention.query_key_value.weight", out="h.{L}.self_attention.dense.weight"),
        ("qkv",),
        model_types=("falcon", "refinedweb", "refinedwebmodel", "falconforcausallm"),
        doc="Falcon (query_key_value; new_decoder_architecture: per kv group, multi_query: "
        "H q heads then one k and one v, else per head like NeoX)",
    ),
    Family(
        "bloom",
        "qkv",
        _r(qkv="h.{L}.self_attention.query_key_value.weight", out="h.{L}.self_attention.dense.weight"),
        ("qkv",),
        qkv_order="per_head",
        uses_rope=False,
        model_types=("bloom", "bloomforcausallm"),
        doc="BLOOM (same names as Falcon, per head [q; k; v], ALiBi); chosen by config model_type",
    ),
    Family(
        "megatron-core",
        "qkv",
        _r(
            qkv="decoder.layers.{L}.self_attention.linear_qkv.weight",
            out="decoder.layers.{L}.self_attention.linear_proj.weight",
            q_norm="decoder.layers.{L}.self_attention.q_layernorm.weight",
            k_norm="decoder.layers.{L}.self_attention.k_layernorm.weight",
            router="decoder.layers.{L}.mlp.router.weight",
            router_bias="decoder.layers.{L}.mlp.router.expert_bias",
        ),
        ("qkv",),
        qkv_order="per_group",
        model_types=("megatron", "gpt"),
        doc="Megatron-Core GPT (linear_qkv [(H + 2G)*h, d] per query group [q..; k; v]); router "
        "mlp.router [E, d] [+ expert_bias]; head counts from config.json or a layout file",
        notes=(
            (
                "megatron: q/k layernorm gains folded assuming RMSNorm/LayerNorm without "
                "zero-centered gamma; a LayerNorm bias is not part of the bilinear form"
            ),
        ),
    ),
    Family(
        "megatron-core-dist",
        "qkv",
        _r(
            qkv="decoder.layers.self_attention.linear_qkv.weight",
            out="decoder.layers.self_attention.linear_proj.weight",
            q_norm="decoder.layers.self_attention.q_layernorm.weight",
            k_norm="decoder.layers.self_attention.k_layernorm.weight",
            router="decoder.layers.mlp.router.weight",
            router_bias="decoder.layers.mlp.router.expert_bias",
        ),
        ("qkv",),
        qkv_order="per_group",
        model_types=("megatron", "gpt"),
        doc="Megatron-Core torch_dist checkpoints: the same tensors stacked over layers "
        "(decoder.layers.self_attention.linear_qkv.weight [L, (H + 2G)*h, d], ...)",
        notes=(
            (
                "megatron-core-dist: layers are stacked in one tensor; each layer reads the whole "
                "stack and keeps its slice"
            ),
        ),
    ),
    Family(
        "megatron-legacy",
        "qkv",
        _r(
            qkv="encoder.layers.{L}.self_attention.query_key_value.weight",
            out="encoder.layers.{L}.self_attention.dense.weight",
        ),
        ("qkv",),
        qkv_order="per_group",
        model_types=("megatron-legacy",),
        doc="Megatron-LM legacy (language_model.encoder.layers.{i}.self_attention.query_key_value, "
        "per query group; checkpoint_version >= 2)",
        notes=("megatron-legacy: assumes checkpoint_version >= 2 (per-group qkv order)",),
    ),
    Family(
        "torchtitan",
        "separate",
        _r(
            q="layers.{L}.attention.wq.weight",
            k="layers.{L}.attention.wk.weight",
            out="layers.{L}.attention.wo.weight",
            q_norm="layers.{L}.attention.q_norm.weight",
            k_norm="layers.{L}.attention.k_norm.weight",
            router=("layers.{L}.moe.router.gate.weight", "layers.{L}.feed_forward.gate.weight"),
            router_bias="layers.{L}.moe.expert_bias",
        ),
        ("q", "k"),
        model_types=("torchtitan", "llama3", "qwen3_titan"),
        doc="torchtitan llama3 / qwen3 / MoE and Meta/Mistral native format (attention.wq/wk; router "
        "moe.router.gate [E, d] [+ moe.expert_bias], or Mistral-native feed_forward.gate)",
    ),
    Family(
        "torchtitan-mla",
        "mla",
        _r(
            q="layers.{L}.attention.wq.weight",
            out="layers.{L}.attention.wo.weight",
            q_a="layers.{L}.attention.wq_a.weight",
            q_a_norm="layers.{L}.attention.q_norm.weight",
            q_b="layers.{L}.attention.wq_b.weight",
            kv_a="layers.{L}.attention.wkv_a.weight",
            kv_a_norm="layers.{L}.attention.kv_norm.weight",
            kv_b="layers.{L}.attention.wkv_b.weight",
            router="layers.{L}.moe.router.gate.weight",
            router_bias="layers.{L}.moe.expert_bias",
        ),
        ("kv_a", "kv_b"),
        model_types=("deepseek_v3_titan",),
        doc="torchtitan deepseek_v3 MLA (attention.wq_a/q_norm/wq_b or wq, wkv_a, kv_norm, wkv_b)",
    ),
    Family(
        "olmo-core",
        "separate",
        _r(
            q="blocks.{L}.attention.w_q.weight",
            out="blocks.{L}.attention.w_out.weight",
            k="blocks.{L}.attention.w_k.weight",
            q_norm="blocks.{L}.attention.q_norm.weight",
            k_norm="blocks.{L}.attention.k_norm.weight",
            router="blocks.{L}.feed_forward_moe.router.weight",
            router_bias="blocks.{L}.feed_forward_moe.router.score_bias",
        ),
        ("q", "k"),
        router_flat=True,
        model_types=("olmo-core", "olmo_core"),
        doc="OLMo-core (attention.w_q/w_k, q_norm/k_norm; router feed_forward_moe.router.weight stored "
        "flattened [E*d] [+ score_bias])",
    ),
)

BY_NAME = {f.name: f for f in FAMILIES}
