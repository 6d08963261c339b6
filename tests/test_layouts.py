"""Layout resolution: every family is built from known unfused per-head weights, saved the way that
framework saves it (names, fusing, transposes), and must come back exactly.

The fusing helpers here are deliberately written as explicit per-head loops following each framework's
source (transformers, Megatron-Core, OLMo-core...), independent of the views used in ckptscan.
"""

from __future__ import annotations

import math

import pytest
import torch

from ckptscan.errors import LayoutError
from ckptscan.layouts import FAMILIES, resolve_layout
from ckptscan.readers.base import TensorInfo

D, H, G, HD = 32, 4, 2, 8  # hidden, query heads, kv heads, head dim
E = 6  # experts


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rnd(*shape, g: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=g).to(dtype)


def infos_of(sd: dict[str, torch.Tensor]) -> dict[str, TensorInfo]:
    return {
        k: TensorInfo(k, tuple(v.shape), str(v.dtype).removeprefix("torch."), "model.safetensors")
        for k, v in sd.items()
    }


class Recorder:
    """A ``read`` that remembers which tensors were asked for."""

    def __init__(self, sd):
        self.sd, self.seen = sd, []

    def __call__(self, name):
        self.seen.append(name)
        return self.sd[name]


def load(block, sd):
    """Run block.load, checking it reads exactly the tensors it declares (and nothing else)."""
    rec = Recorder(sd)
    out = block.load(rec)
    assert set(rec.seen) == set(block.tensors), (rec.seen, block.tensors)
    assert len(rec.seen) == len(set(rec.seen))
    for t in out:
        assert t is None or t.dtype == torch.float32
    return out


def heads(n_layers=2, H=H, G=G, h=HD, d=D, seed=0, dtype=torch.float32):
    """Per layer: (Wq [H, h, d], Wk [G, h, d], Wv [G, h, d]) -- the unfused truth."""
    g = gen(seed)
    return [
        (rnd(H, h, d, g=g, dtype=dtype), rnd(G, h, d, g=g, dtype=dtype), rnd(G, h, d, g=g, dtype=dtype))
        for _ in range(n_layers)
    ]


def cat_rows(blocks):
    return torch.cat([b.reshape(-1, b.shape[-1]) for b in blocks], dim=0)


def assert_attn(layout, truth, sd, *, H=H, G=G, h=HD):
    blocks = [b for b in layout.attention if b.name == "attn"]
    assert [b.layer for b in blocks] == list(range(len(truth)))
    for b, (wq, wk, _) in zip(blocks, truth, strict=False):
        assert (b.n_heads, b.n_kv_heads, b.head_dim) == (H, G, h)
        q, k = load(b, sd)
        torch.testing.assert_close(q, wq.float(), rtol=0, atol=0)
        torch.testing.assert_close(k, wk.float(), rtol=0, atol=0)


def hf_llama_sd(truth, prefix="model.", extra=None):
    sd = {}
    for i, (wq, wk, wv) in enumerate(truth):
        p = f"{prefix}layers.{i}."
        sd[p + "self_attn.q_proj.weight"] = cat_rows(wq)
        sd[p + "self_attn.k_proj.weight"] = cat_rows(wk)
        sd[p + "self_attn.v_proj.weight"] = cat_rows(wv)
        sd[p + "self_attn.o_proj.weight"] = torch.zeros(D, wq.shape[0] * wq.shape[1])
        sd[p + "mlp.gate_proj.weight"] = torch.zeros(64, D)
        sd[p + "mlp.up_proj.weight"] = torch.zeros(64, D)
        sd[p + "input_layernorm.weight"] = torch.ones(D)
        if extra:
            sd.update(extra(i, p))
    sd[prefix + "embed_tokens.weight"] = torch.zeros(50, D)
    return sd


LLAMA_CFG = {
    "model_type": "llama",
    "num_attention_heads": H,
    "num_key_value_heads": G,
    "hidden_size": D,
    "num_hidden_layers": 2,
    "rope_theta": 500000.0,
}


# ------------------------------------------------------------------ HF separate q/k families


def test_llama_gqa_exact_and_no_router():
    truth = heads(dtype=torch.bfloat16)
    sd = hf_llama_sd(truth)
    lay = resolve_layout(infos_of(sd), LLAMA_CFG)
    assert lay.family == "llama"
    assert lay.routers == []  # mlp.gate_proj is an FFN, not a router
    assert_attn(lay, truth, sd)
    assert lay.config.rope_theta == 500000.0 and lay.config.uses_rope
    assert lay.n_layers == 2
    # GQA convention: query head j reads key head j // (H/G)
    assert lay.attention[0].kv_index().tolist() == [0, 0, 1, 1]


def test_llama_without_config_needs_heads():
    sd = hf_llama_sd(heads())
    with pytest.raises(LayoutError, match=r"pass --heads N \(and --kv-heads G\), or --config PATH"):
        resolve_layout(infos_of(sd), None)
    lay = resolve_layout(infos_of(sd), None, overrides={"num_attention_heads": 4, "num_key_value_heads": 2})
    assert (lay.attention[0].n_heads, lay.attention[0].n_kv_heads) == (4, 2)


def test_rope_parameters_and_head_dim_fallback():
    sd = hf_llama_sd(heads())
    cfg = {
        "model_type": "llama",
        "num_attention_heads": H,
        "num_key_value_heads": G,
        "hidden_size": D,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5},
    }
    lay = resolve_layout(infos_of(sd), cfg)
    assert lay.config.rope_theta == 1e6 and lay.config.partial_rotary_factor == 0.5
    assert lay.config.head_dim == D // H  # hidden_size / heads when head_dim is absent


def qwen3_extra(gq, gk):
    return lambda i, p: {p + "self_attn.q_norm.weight": gq[i], p + "self_attn.k_norm.weight": gk[i]}


def test_qwen3_per_head_norm_folded_into_rows():
    truth = heads(seed=1)
    g = gen(5)
    gq = [rnd(HD, g=g) for _ in truth]
    gk = [rnd(HD, g=g) for _ in truth]
    sd = hf_llama_sd(truth, extra=qwen3_extra(gq, gk))
    cfg = dict(LLAMA_CFG, model_type="qwen3", head_dim=HD)
    lay = resolve_layout(infos_of(sd), cfg)
    assert lay.family == "llama" and lay.config.qk_norm
    for b, (wq, wk, _) in zip(lay.attention, truth, strict=False):
        q, k = load(b, sd)
        for j in range(H):
            torch.testing.assert_close(q[j], torch.diag(gq[b.layer]) @ wq[j])
        for j in range(G):
            torch.testing.assert_close(k[j], torch.diag(gk[b.layer]) @ wk[j])


def test_qwen3_head_dim_inferred_from_norm_without_config():
    truth = heads(seed=1)
    ones = [torch.ones(HD) for _ in truth]
    sd = hf_llama_sd(truth, extra=qwen3_extra(ones, ones))
    lay = resolve_layout(infos_of(sd), None)
    assert_attn(lay, truth, sd)


def test_gemma3_norm_offset_chosen_by_model_type():
    truth = heads(seed=2)
    g = gen(6)
    gq = [rnd(HD, g=g) for _ in truth]
    gk = [rnd(HD, g=g) for _ in truth]
    sd = hf_llama_sd(truth, extra=qwen3_extra(gq, gk))
    lay = resolve_layout(infos_of(sd), dict(LLAMA_CFG, model_type="gemma3_text", head_dim=HD))
    assert lay.family == "gemma3"
    q, k = load(lay.attention[1], sd)
    torch.testing.assert_close(q[3], torch.diag(1 + gq[1]) @ truth[1][0][3])
    torch.testing.assert_close(k[1], torch.diag(1 + gk[1]) @ truth[1][1][1])


def router_rows(seed=3, E=E, d=D):
    return rnd(E, d, g=gen(seed))


def test_mixtral_router():
    truth = heads()
    routers = [router_rows(10 + i) for i in range(2)]
    sd = hf_llama_sd(
        truth,
        extra=lambda i, p: {
            p + "block_sparse_moe.gate.weight": routers[i],
            p + "block_sparse_moe.experts.0.w1.weight": torch.zeros(64, D),
        },
    )
    lay = resolve_layout(
        infos_of(sd), dict(LLAMA_CFG, model_type="mixtral", num_local_experts=E, num_experts_per_tok=2)
    )
    assert lay.family == "mixtral"
    assert [r.layer for r in lay.routers] == [0, 1]
    r = lay.routers[1]
    assert (r.n_experts, r.hidden, r.routing, r.top_k) == (E, D, "softmax_topk", 2)
    w, b = load(r, sd)
    assert b is None
    torch.testing.assert_close(w, routers[1], rtol=0, atol=0)
    assert_attn(lay, truth, sd)


def test_qwen2_moe_shared_expert_gate_is_not_the_router():
    truth = heads()
    routers = [router_rows(20 + i) for i in range(2)]

    def extra(i, p):
        return {
            p + "mlp.gate.weight": routers[i],
            p + "mlp.shared_expert_gate.weight": torch.ones(1, D),
            p + "mlp.shared_expert.gate_proj.weight": torch.zeros(64, D),
        }

    sd = hf_llama_sd(truth, extra=extra)
    lay = resolve_layout(infos_of(sd), dict(LLAMA_CFG, model_type="qwen2_moe", num_experts=E))
    assert lay.family == "qwen-moe"
    assert [r.tensors for r in lay.routers] == [
        ("model.layers.0.mlp.gate.weight",),
        ("model.layers.1.mlp.gate.weight",),
    ]
    w, _ = load(lay.routers[0], sd)
    torch.testing.assert_close(w, routers[0])


def test_olmoe_whole_projection_norm_and_router():
    truth = heads(seed=4, G=H)  # OLMoE: no GQA
    g = gen(7)
    gq = [rnd(H * HD, g=g) for _ in truth]
    gk = [rnd(H * HD, g=g) for _ in truth]
    routers = [router_rows(30 + i) for i in range(2)]

    def extra(i, p):
        return {
            p + "self_attn.q_norm.weight": gq[i],
            p + "self_attn.k_norm.weight": gk[i],
            p + "mlp.gate.weight": routers[i],
        }

    sd = hf_llama_sd(truth, extra=extra)
    cfg = {
        "model_type": "olmoe",
        "num_attention_heads": H,
        "num_key_value_heads": H,
        "hidden_size": D,
        "num_experts": E,
        "num_experts_per_tok": 2,
    }
    lay = resolve_layout(infos_of(sd), cfg)
    assert lay.family == "qwen-moe" and lay.routers[0].n_experts == E
    assert any("whole projection" in n for n in lay.notes)
    q, k = load(lay.attention[0], sd)
    for j in range(H):
        torch.testing.assert_close(q[j], torch.diag(gq[0][j * HD : (j + 1) * HD]) @ truth[0][0][j])
        torch.testing.assert_close(k[j], torch.diag(gk[0][j * HD : (j + 1) * HD]) @ truth[0][1][j])


def test_gpt_oss_router_bias_topk_softmax():
    truth = heads()
    routers = [router_rows(40 + i) for i in range(2)]
    biases = [rnd(E, g=gen(50 + i)) for i in range(2)]
    sd = hf_llama_sd(
        truth,
        extra=lambda i, p: {
            p + "mlp.router.weight": routers[i],
            p + "mlp.router.bias": biases[i],
            p + "self_attn.sinks": torch.zeros(H),
        },
    )
    lay = resolve_layout(infos_of(sd), dict(LLAMA_CFG, model_type="gpt_oss", num_local_experts=E))
    assert lay.family == "gpt-oss"
    r = lay.routers[1]
    assert r.routing == "topk_softmax"
    w, b = load(r, sd)
    torch.testing.assert_close(w, routers[1])
    torch.testing.assert_close(b, biases[1])
    assert_attn(lay, truth, sd)


# ------------------------------------------------------------------ DeepSeek MLA

NOPE, ROPE, VD, QL, KVL = 6, 4, 5, 12, 10


def deepseek_sd(n_layers=3, q_lora=True, first_dense=1, v3=True, seed=8, fp8=False):
    g = gen(seed)
    sd, parts = {}, []
    for i in range(n_layers):
        p = f"model.layers.{i}.self_attn."
        t = {}
        if q_lora:
            t["q_a"], t["q_a_norm"] = rnd(QL, D, g=g), rnd(QL, g=g)
            t["q_b"] = rnd(H * (NOPE + ROPE), QL, g=g)
            sd[p + "q_a_proj.weight"], sd[p + "q_a_layernorm.weight"] = t["q_a"], t["q_a_norm"]
            sd[p + "q_b_proj.weight"] = t["q_b"]
        else:
            t["q"] = rnd(H * (NOPE + ROPE), D, g=g)
            sd[p + "q_proj.weight"] = t["q"]
        t["kv_a"], t["kv_a_norm"] = rnd(KVL + ROPE, D, g=g), rnd(KVL, g=g)
        t["kv_b"] = rnd(H * (NOPE + VD), KVL, g=g)
        sd[p + "kv_a_proj_with_mqa.weight"], sd[p + "kv_a_layernorm.weight"] = t["kv_a"], t["kv_a_norm"]
        sd[p + "kv_b_proj.weight"] = t["kv_b"]
        sd[p + "o_proj.weight"] = torch.zeros(D, H * VD)
        m = f"model.layers.{i}.mlp."
        if i < first_dense:
            sd[m + "gate_proj.weight"] = torch.zeros(64, D)
        else:
            t["router"] = rnd(E, D, g=g)
            sd[m + "gate.weight"] = t["router"]
            sd[m + "experts.0.gate_proj.weight"] = torch.zeros(16, D)
            sd[m + "shared_experts.gate_proj.weight"] = torch.zeros(16, D)
            if v3:
                t["bias"] = rnd(E, g=g)
                sd[m + "gate.e_score_correction_bias"] = t["bias"]
        parts.append(t)
    cfg = {
        "model_type": "deepseek_v3" if v3 else "deepseek_v2",
        "num_attention_heads": H,
        "num_key_value_heads": H,
        "hidden_size": D,
        "q_lora_rank": QL if q_lora else None,
        "kv_lora_rank": KVL,
        "qk_nope_head_dim": NOPE,
        "qk_rope_head_dim": ROPE,
        "v_head_dim": VD,
        "n_routed_experts": E,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": first_dense,
        "scoring_func": "sigmoid" if v3 else "softmax",
    }
    return sd, parts, cfg


def mla_reference(t):
    """Materialise the full projections the way DeepseekV3Attention.forward applies them (norm gains
    included), then cut per head: q = q_b(norm(q_a x)), [k_nope; v] = kv_b(norm(kv_a x)[:kv_lora])."""
    if "q" in t:
        q_full = t["q"]
    else:
        q_full = t["q_b"] @ (t["q_a_norm"][:, None] * t["q_a"])
    k_full = t["kv_b"] @ (t["kv_a_norm"][:, None] * t["kv_a"][:KVL])
    k_pe = t["kv_a"][KVL:]
    m_nope, m_rope = [], []
    for j in range(H):
        qj = q_full[j * (NOPE + ROPE) : (j + 1) * (NOPE + ROPE)]
        kj = k_full[j * (NOPE + VD) : (j + 1) * (NOPE + VD)]
        m_nope.append(qj[:NOPE].T @ kj[:NOPE])
        m_rope.append(qj[NOPE:].T @ k_pe)
    return m_nope, m_rope


@pytest.mark.parametrize("q_lora", [True, False])
def test_deepseek_mla_bilinear_forms(q_lora):
    sd, parts, cfg = deepseek_sd(q_lora=q_lora)
    lay = resolve_layout(infos_of(sd), cfg)
    assert lay.family == "deepseek-mla"
    for i, t in enumerate(parts):
        blocks = {b.name: b for b in lay.attention if b.layer == i}
        nope, rope = blocks["attn"], blocks["attn_rope"]
        assert (nope.n_heads, nope.n_kv_heads, nope.head_dim, nope.rope) == (H, H, NOPE, False)
        assert (rope.n_heads, rope.n_kv_heads, rope.head_dim, rope.rope) == (H, 1, ROPE, True)
        m_nope, m_rope = mla_reference(t)
        wq, wk = load(nope, sd)
        for j in range(H):
            torch.testing.assert_close(wq[j].T @ wk[nope.kv_index()[j]], m_nope[j], rtol=1e-4, atol=1e-3)
        wq, wk = load(rope, sd)
        for j in range(H):
            torch.testing.assert_close(wq[j].T @ wk[rope.kv_index()[j]], m_rope[j], rtol=1e-4, atol=1e-3)
        # the RoPE block reads neither kv_b nor the kv latent norm
        assert not any("kv_b_proj" in n or "kv_a_layernorm" in n for n in rope.tensors)


def test_deepseek_routers_v3_and_v2():
    sd, parts, cfg = deepseek_sd(v3=True)
    lay = resolve_layout(infos_of(sd), cfg)
    assert [r.layer for r in lay.routers] == [1, 2]  # first_k_dense_replace = 1
    r = lay.routers[0]
    assert r.routing == "sigmoid_bias" and r.top_k == 2
    w, b = load(r, sd)
    torch.testing.assert_close(w, parts[1]["router"])
    torch.testing.assert_close(b, parts[1]["bias"])
    sd, parts, cfg = deepseek_sd(v3=False)
    lay = resolve_layout(infos_of(sd), cfg)
    assert all(r.routing == "softmax_topk" for r in lay.routers)
    assert load(lay.routers[0], sd)[1] is None


def test_deepseek_config_mismatch_names_numbers():
    sd, _, cfg = deepseek_sd()
    with pytest.raises(LayoutError, match=r"qk_nope_head_dim = 6 .* 7"):
        resolve_layout(infos_of(sd), dict(cfg, qk_nope_head_dim=7))


def test_fp8_block_scales_dequantised():
    g = gen(9)
    sd, _, cfg = deepseek_sd(n_layers=1, first_dense=1)
    name = "model.layers.0.self_attn.kv_b_proj.weight"
    w8 = (rnd(H * (NOPE + VD), KVL, g=g) * 10).to(torch.float8_e4m3fn)
    blk = (8, 4)
    scale = rnd(math.ceil(w8.shape[0] / 8), math.ceil(w8.shape[1] / 4), g=g).abs()
    sd[name], sd[name + "_scale_inv"] = w8, scale
    cfg["quantization_config"] = {"quant_method": "fp8", "weight_block_size": list(blk)}
    lay = resolve_layout(infos_of(sd), cfg)
    block = next(b for b in lay.attention if b.name == "attn")
    assert name + "_scale_inv" in block.tensors
    ref = torch.empty(w8.shape)
    for r in range(w8.shape[0]):
        for c in range(w8.shape[1]):
            ref[r, c] = w8[r, c].float() * scale[r // 8, c // 4]
    kv_b = ref.reshape(H, NOPE + VD, KVL)
    lat = (
        sd["model.layers.0.self_attn.kv_a_layernorm.weight"][:, None]
        * sd["model.layers.0.self_attn.kv_a_proj_with_mqa.weight"][:KVL]
    )
    _, wk = load(block, sd)
    torch.testing.assert_close(wk[2], kv_b[2, :NOPE] @ lat)


# ------------------------------------------------------------------ fused qkv families


def test_gpt2_conv1d_transposed():
    truth = heads(G=H, seed=11)
    sd = {}
    for i, (wq, wk, wv) in enumerate(truth):
        # Conv1D: y = x @ W + b with W [d, 3d]; q|k|v contiguous along the output dim
        sd[f"h.{i}.attn.c_attn.weight"] = torch.cat([cat_rows(wq), cat_rows(wk), cat_rows(wv)], 0).T.clone()
        sd[f"h.{i}.attn.c_attn.bias"] = torch.zeros(3 * D)
        sd[f"h.{i}.attn.c_proj.weight"] = torch.zeros(D, D)
        sd[f"h.{i}.mlp.c_fc.weight"] = torch.zeros(D, 4 * D)
    sd["wte.weight"] = torch.zeros(50, D)
    lay = resolve_layout(infos_of(sd), {"model_type": "gpt2", "n_head": H, "n_embd": D, "n_layer": 2})
    assert lay.family == "gpt2" and not lay.config.uses_rope
    assert not any(b.rope for b in lay.attention)
    assert_attn(lay, truth, sd, G=H)


def test_gpt2_without_config_is_a_clear_error():
    sd = {"transformer.h.0.attn.c_attn.weight": torch.zeros(D, 3 * D)}
    with pytest.raises(LayoutError, match="transformer.h.0.attn.c_attn.weight.*layout file"):
        resolve_layout(infos_of(sd), None)


def neox_fuse(wq, wk, wv):
    """GPT-NeoX / BLOOM / old Falcon: per head [q_j; k_j; v_j]."""
    return torch.cat([torch.cat([wq[j], wk[j], wv[j]], 0) for j in range(wq.shape[0])], 0)


def per_group_fuse(wq, wk, wv):
    """Megatron-Core linear_qkv / Falcon new_decoder_architecture: per kv group [q..; k_g; v_g]."""
    Hq, Gk = wq.shape[0], wk.shape[0]
    r = Hq // Gk
    out = []
    for gi in range(Gk):
        out += [wq[gi * r + t] for t in range(r)] + [wk[gi], wv[gi]]
    return torch.cat(out, 0)


def test_gpt_neox_per_head_and_partial_rotary():
    truth = heads(G=H, seed=12)
    sd = {f"gpt_neox.layers.{i}.attention.query_key_value.weight": neox_fuse(*t) for i, t in enumerate(truth)}
    sd.update({f"gpt_neox.layers.{i}.attention.dense.weight": torch.zeros(D, D) for i in range(2)})
    cfg = {
        "model_type": "gpt_neox",
        "num_attention_heads": H,
        "hidden_size": D,
        "rotary_pct": 0.25,
        "rotary_emb_base": 10000,
    }
    lay = resolve_layout(infos_of(sd), cfg)
    assert lay.family == "gpt-neox"
    assert lay.config.partial_rotary_factor == 0.25 and lay.config.rope_theta == 10000
    assert_attn(lay, truth, sd, G=H)


def test_phi3_contiguous_gqa():
    truth = heads(seed=13)
    sd = {
        f"model.layers.{i}.self_attn.qkv_proj.weight": torch.cat([cat_rows(q), cat_rows(k), cat_rows(v)], 0)
        for i, (q, k, v) in enumerate(truth)
    }
    lay = resolve_layout(
        infos_of(sd),
        {"model_type": "phi3", "num_attention_heads": H, "num_key_value_heads": G, "hidden_size": D},
    )
    assert lay.family == "phi3"
    assert_attn(lay, truth, sd)


def falcon_sd(truth, fuse):
    return {f"transformer.h.{i}.self_attention.query_key_value.weight": fuse(*t) for i, t in enumerate(truth)}


def test_falcon_new_decoder_architecture():
    truth = heads(seed=14)
    sd = falcon_sd(truth, per_group_fuse)
    cfg = {
        "model_type": "falcon",
        "num_attention_heads": H,
        "num_kv_heads": G,
        "hidden_size": D,
        "new_decoder_architecture": True,
        "multi_query": True,
    }
    lay = resolve_layout(infos_of(sd), cfg)
    assert lay.family == "falcon"
    assert_attn(lay, truth, sd)


def test_falcon_multi_query():
    truth = heads(G=1, seed=15)
    sd = falcon_sd(truth, lambda q, k, v: torch.cat([cat_rows(q), k[0], v[0]], 0))
    cfg = {
        "model_type": "falcon",
        "num_attention_heads": H,
        "hidden_size": D,
        "multi_query": True,
        "new_decoder_architecture": False,
    }
    lay = resolve_layout(infos_of(sd), cfg)
    assert_attn(lay, truth, sd, G=1)


@pytest.mark.parametrize("flags", [{"multi_query": False}, {}])  # explicit, and inferred from shape
def test_falcon_per_head_rw(flags):
    truth = heads(G=H, seed=16)
    sd = falcon_sd(truth, neox_fuse)
    cfg = {"model_type": "falcon", "num_attention_heads": H, "hidden_size": D, "alibi": True, **flags}
    lay = resolve_layout(infos_of(sd), cfg)
    assert not lay.config.uses_rope  # falcon-rw uses ALiBi
    assert_attn(lay, truth, sd, G=H)


def test_falcon_flags_disagree_with_shape():
    truth = heads(G=H, seed=16)
    sd = falcon_sd(truth, neox_fuse)  # 3*H*h rows
    cfg = {"model_type": "falcon", "num_attention_heads": H, "hidden_size": D, "multi_query": True}
    with pytest.raises(LayoutError, match=rf"{3 * H * HD} rows.*{(H + 2) * HD}"):
        resolve_layout(infos_of(sd), cfg)


def test_bloom_chosen_by_model_type():
    truth = heads(G=H, seed=17)
    sd = falcon_sd(truth, neox_fuse)
    lay = resolve_layout(infos_of(sd), {"model_type": "bloom", "n_head": H, "hidden_size": D})
    assert lay.family == "bloom" and not lay.config.uses_rope
    assert_attn(lay, truth, sd, G=H)


def megatron_sd(truth, routers=None, biases=None, norms=None):
    sd = {}
    for i, t in enumerate(truth):
        p = f"decoder.layers.{i}."
        sd[p + "self_attention.linear_qkv.weight"] = per_group_fuse(*t)
        sd[p + "self_attention.linear_qkv.layer_norm_weight"] = torch.ones(D)
        sd[p + "self_attention.linear_proj.weight"] = torch.zeros(D, H * HD)
        if norms:
            sd[p + "self_attention.q_layernorm.weight"] = norms[i][0]
            sd[p + "self_attention.k_layernorm.weight"] = norms[i][1]
        if routers:
            sd[p + "mlp.router.weight"] = routers[i]
            sd[p + "mlp.experts.linear_fc1.weight0"] = torch.zeros(16, D)
            if biases:
                sd[p + "mlp.router.expert_bias"] = biases[i]
    sd["embedding.word_embeddings.weight"] = torch.zeros(50, D)
    return sd


def write(tmp_path, text, name="layout.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_megatron_core_needs_heads_then_splits_per_group(tmp_path):
    truth = heads(seed=18)
    g = gen(19)
    norms = [(rnd(HD, g=g), rnd(HD, g=g)) for _ in truth]
    routers = [router_rows(60 + i) for i in range(2)]
    biases = [rnd(E, g=g) for _ in truth]
    sd = megatron_sd(truth, routers, biases, norms)
    with pytest.raises(LayoutError, match="linear_qkv.*--layout"):
        resolve_layout(infos_of(sd), None)
    lay = resolve_layout(infos_of(sd), None, write(tmp_path, "[model]\nheads = 4\nkv_heads = 2\n"))
    assert lay.family == "megatron-core"
    for b, (wq, wk, _) in zip(lay.attention, truth, strict=False):
        q, k = load(b, sd)
        for j in range(H):
            torch.testing.assert_close(q[j], torch.diag(norms[b.layer][0]) @ wq[j])
        for j in range(G):
            torch.testing.assert_close(k[j], torch.diag(norms[b.layer][1]) @ wk[j])
    r = lay.routers[1]
    assert r.routing == "sigmoid_bias"
    w, bias = load(r, sd)
    torch.testing.assert_close(w, routers[1])
    torch.testing.assert_close(bias, biases[1])
    # a minimal config.json with Megatron's names works too; no expert_bias -> softmax
    sd2 = megatron_sd(truth, routers)
    lay2 = resolve_layout(infos_of(sd2), {"num_attention_heads": H, "num_query_groups": G})
    assert_attn(lay2, truth, sd2)
    assert lay2.routers[0].routing == "softmax_topk"


def test_megatron_heads_disagree_with_shape():
    sd = megatron_sd(heads(seed=18))
    with pytest.raises(LayoutError, match=r"linear_qkv.weight has 64 rows.*heads 4.*kv heads 1.*48"):
        resolve_layout(infos_of(sd), {"num_attention_heads": H, "num_query_groups": 1})


# ------------------------------------------------------------------ torchtitan and OLMo-core


def test_torchtitan_moe(tmp_path):
    truth = heads(seed=21)
    routers = [router_rows(70 + i) for i in range(2)]
    biases = [rnd(E, g=gen(80 + i)) for i in range(2)]
    sd = {}
    for i, (wq, wk, wv) in enumerate(truth):
        p = f"layers.{i}."
        sd[p + "attention.wq.weight"], sd[p + "attention.wk.weight"] = cat_rows(wq), cat_rows(wk)
        sd[p + "attention.wv.weight"], sd[p + "attention.wo.weight"] = cat_rows(wv), torch.zeros(D, D)
        sd[p + "moe.router.gate.weight"], sd[p + "moe.expert_bias"] = routers[i], biases[i]
        sd[p + "moe.experts.w1"] = torch.zeros(E, 16, D)
        sd[p + "moe.tokens_per_expert"] = torch.zeros(E)
    sd["tok_embeddings.weight"] = torch.zeros(50, D)
    lay = resolve_layout(infos_of(sd), None, write(tmp_path, "[model]\nheads = 4\nkv_heads = 2\n"))
    assert lay.family == "torchtitan"
    assert_attn(lay, truth, sd)
    w, b = load(lay.routers[0], sd)
    torch.testing.assert_close(w, routers[0])
    torch.testing.assert_close(b, biases[0])


def olmo_core_sd(truth, routers, with_norm=True):
    sd = {}
    for i, (wq, wk, wv) in enumerate(truth):
        p = f"blocks.{i}."
        sd[p + "attention.w_q.weight"], sd[p + "attention.w_k.weight"] = cat_rows(wq), cat_rows(wk)
        sd[p + "attention.w_v.weight"], sd[p + "attention.w_out.weight"] = cat_rows(wv), torch.zeros(D, D)
        if with_norm:
            sd[p + "attention.q_norm.weight"] = torch.ones(HD)
            sd[p + "attention.k_norm.weight"] = torch.ones(HD)
        # MoELinearRouter keeps its weight flattened: nn.Parameter(torch.empty(num_experts * d_model))
        sd[p + "feed_forward_moe.router.weight"] = routers[i].reshape(-1).clone()
        sd[p + "feed_forward_moe.experts.mlp.w1"] = torch.zeros(E * 16, D)
    return sd


def test_olmo_core_flat_router_nested_config():
    truth = heads(seed=22)
    routers = [router_rows(90 + i) for i in range(2)]
    sd = olmo_core_sd(truth, routers, with_norm=False)
    cfg = {
        "model": {
            "d_model": D,
            "n_layers": 2,
            "block": {
                "attention": {"n_heads": H, "n_kv_heads": G},
                "feed_forward_moe": {"num_experts": E, "router": {"top_k": 2}},
            },
        }
    }
    lay = resolve_layout(infos_of(sd), cfg)
    assert lay.family == "olmo-core"
    assert_attn(lay, truth, sd)
    r = lay.routers[0]
    assert (r.n_experts, r.hidden, r.top_k) == (E, D, 2)
    w, _ = load(r, sd)
    assert w.shape == (E, D)
    for e in range(E):
        torch.testing.assert_close(w[e], routers[0][e], rtol=0, atol=0)


def test_olmo_core_without_config_infers_from_shapes():
    truth = heads(seed=23)
    routers = [router_rows(95 + i) for i in range(2)]
    sd = olmo_core_sd(truth, routers)  # per-head q_norm gives head_dim; E = numel / d
    lay = resolve_layout(infos_of(sd), None)
    assert_attn(lay, truth, sd)
    assert lay.routers[1].n_experts == E
    torch.testing.assert_close(load(lay.routers[1], sd)[0], routers[1])


def test_olmo_core_expert_count_disagrees():
    sd = olmo_core_sd(heads(seed=23), [router_rows(1), router_rows(2)])
    with pytest.raises(LayoutError, match=rf"router.weight: shape gives experts = {E} .* 8"):
        resolve_layout(infos_of(sd), {"d_model": D, "n_heads": H, "n_kv_heads": G, "num_experts": 8})


# ------------------------------------------------------------------ prefixes, validation, errors


@pytest.mark.parametrize(
    "prefix",
    [
        "module.model.",
        "_orig_mod.model.",
        "model.model.",
        "model._orig_mod.model.",
        "module._orig_mod.transformer.",
    ],
)
def test_wrapper_prefixes(prefix):
    truth = heads(seed=24)
    sd = hf_llama_sd(truth, prefix=prefix)
    lay = resolve_layout(infos_of(sd), LLAMA_CFG)
    assert lay.family == "llama"
    assert_attn(lay, truth, sd)
    assert lay.attention[0].tensors[0].startswith(prefix)  # original names are what gets read


def test_fsdp_wrapper_segments_inside_names():
    truth = heads(seed=25)
    sd = {
        k.replace(".self_attn.", "._checkpoint_wrapped_module.self_attn.").replace(
            "model.", "_fsdp_wrapped_module.model.", 1
        ): v
        for k, v in hf_llama_sd(truth).items()
    }
    assert "_fsdp_wrapped_module.model.layers.0._checkpoint_wrapped_module.self_attn.q_proj.weight" in sd
    lay = resolve_layout(infos_of(sd), LLAMA_CFG)
    assert_attn(lay, truth, sd)


def test_multimodal_picks_language_model_prefix():
    truth = heads(seed=26)
    sd = hf_llama_sd(truth, prefix="model.language_model.")
    vision = hf_llama_sd(heads(n_layers=3, G=H, seed=27), prefix="model.vision_tower.encoder.")
    sd.update(vision)
    lay = resolve_layout(
        infos_of(sd),
        {
            "model_type": "llava",
            "text_config": {
                "model_type": "llama",
                "num_attention_heads": H,
                "num_key_value_heads": G,
                "hidden_size": D,
            },
            "vision_config": {"num_attention_heads": 99, "hidden_size": 77},
        },
    )
    assert lay.family == "llama" and len(lay.attention) == 2
    assert_attn(lay, truth, sd)


def test_heads_not_dividing_projection():
    sd = hf_llama_sd(heads())
    with pytest.raises(LayoutError, match=r"q_proj.weight has 32 rows: not divisible into 5 heads"):
        resolve_layout(infos_of(sd), dict(LLAMA_CFG, num_attention_heads=5))
    with pytest.raises(LayoutError, match=r"k_proj.weight: shape gives kv heads = 2 .* = 1"):
        resolve_layout(infos_of(sd), dict(LLAMA_CFG, num_key_value_heads=1))
    with pytest.raises(LayoutError, match=r"q_proj.weight: shape gives heads = 2 .* = 4"):
        resolve_layout(infos_of(sd), dict(LLAMA_CFG, head_dim=16))


def test_missing_k_in_one_layer():
    sd = hf_llama_sd(heads())
    del sd["model.layers.1.self_attn.k_proj.weight"]
    with pytest.raises(LayoutError, match=r"layer 1: model.layers.1.self_attn.q_proj.weight found but no k"):
        resolve_layout(infos_of(sd), LLAMA_CFG)


def test_unknown_architecture_message():
    sd = {f"net.blocks.{i}.attn.{r}.weight": torch.zeros(D, D) for i in range(3) for r in "qkvo"}
    sd["net.embed.weight"] = torch.zeros(50, D)
    with pytest.raises(LayoutError) as ei:
        resolve_layout(infos_of(sd), None)
    msg = str(ei.value)
    assert "\n" not in msg
    assert "net.blocks.0.attn.q.weight [32, 32]" in msg and "net.blocks.1" not in msg
    assert "--layout" in msg and "docs/layouts.md" in msg


def test_user_layout_file_separate_and_router(tmp_path):
    truth = heads(seed=28)
    routers = [router_rows(100 + i) for i in range(2)]
    sd = {}
    for i, (wq, wk, wv) in enumerate(truth):
        sd[f"net.blocks.{i}.attn.q.weight"], sd[f"net.blocks.{i}.attn.k.weight"] = cat_rows(wq), cat_rows(wk)
        sd[f"net.blocks.{i}.attn.v.weight"] = cat_rows(wv)
        sd[f"net.blocks.{i}.moe.gate.weight"] = routers[i]
    f = write(
        tmp_path,
        r"""
[model]
heads = 4
kv_heads = 2
head_dim = 8
[roles]
q = 'net\.blocks\.(\d+)\.attn\.q\.weight'
k = 'net\.blocks\.(\d+)\.attn\.k\.weight'
router = 'net\.blocks\.(?P<layer>\d+)\.moe\.gate\.weight'
routing = "topk_softmax"
""",
    )
    lay = resolve_layout(infos_of(sd), None, f)
    assert lay.family == "layout-file"
    assert_attn(lay, truth, sd)
    assert [r.routing for r in lay.routers] == ["topk_softmax"] * 2
    torch.testing.assert_close(load(lay.routers[1], sd)[0], routers[1])


@pytest.mark.parametrize(
    "order,fuse,kv",
    [
        ("per_group", per_group_fuse, G),
        ("per_head", neox_fuse, H),
        ("contiguous", lambda q, k, v: cat_rows([q, k, v]), G),
    ],
)
def test_user_layout_file_fused(tmp_path, order, fuse, kv):
    truth = heads(G=kv, seed=29)
    sd = {f"blk{i}.qkv.w": fuse(*t) for i, t in enumerate(truth)}
    f = write(
        tmp_path,
        f"[model]\nheads = 4\nkv_heads = {kv}\n[roles]\nqkv = 'blk(\\d+)\\.qkv\\.w'\n"
        f'qkv_order = "{order}"\n',
    )
    lay = resolve_layout(infos_of(sd), None, f)
    assert_attn(lay, truth, sd, G=kv)


@pytest.mark.parametrize(
    "text,pattern",
    [
        ("[roles]\nq = 'a(\\d+)'\nk = 'b(\\d+)'\nvalue = 'c(\\d+)'\n", r"unknown key \[roles\] value"),
        ("[model]\nheds = 4\n", r"unknown key \[model\] heds"),
        ("[modle]\n", r"unknown table"),
        ("[roles]\nq = 'a\\.q'\nk = 'a\\.k'\n", r"one group capturing the layer"),
        ("[roles]\nq = 'a(\\d+'\nk = 'b(\\d+)'\n", r"bad regex"),
        ("[roles]\nq = 'nothing(\\d+)'\nk = 'b(\\d+)'\n", r"\[roles\] q = .* matches no tensor"),
        ("[roles]\nqkv = 'x(\\d+)'\n", r"qkv_order"),
        ("[roles]\nqkv = 'x(\\d+)'\nqkv_order = 'zigzag'\n", r"qkv_order = 'zigzag'"),
        ("[roles]\nrouter = 'x(\\d+)'\nrouting = 'fancy'\n", r"routing = 'fancy'"),
        ("[model]\nheads = 'four'\n", r"heads = 'four': expected int"),
        ("[model]\nheads = 0\n", r"positive"),
        ("[model]\nfamily = 'nope'\n", r"not a known family"),
        ("heads = [\n", r"not valid TOML"),
    ],
)
def test_user_layout_file_errors(tmp_path, text, pattern):
    sd = {"b0": torch.zeros(8, 8), "x0": torch.zeros(8, 8)}
    f = write(tmp_path, text)
    with pytest.raises(LayoutError, match=pattern) as ei:
        resolve_layout(infos_of(sd), None, f)
    assert str(f) in str(ei.value) and "\n" not in str(ei.value)


def test_layout_file_family_forces_registry_entry(tmp_path):
    truth = heads(G=H, seed=30)
    sd = falcon_sd(truth, neox_fuse)
    lay = resolve_layout(
        infos_of(sd), None, write(tmp_path, "[model]\nfamily = 'bloom'\nheads = 4\nhidden_size = 32\n")
    )
    assert lay.family == "bloom"
    assert_attn(lay, truth, sd, G=H)


def test_registry_entries_are_documented():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "layouts.md").read_text()
    for fam in FAMILIES:
        assert f"`{fam.name}`" in doc, fam.name


def test_torchtitan_mla_same_split_as_deepseek(tmp_path):
    sd_hf, parts, _ = deepseek_sd(n_layers=2, first_dense=0, v3=True, seed=31)
    rename = {
        "self_attn.q_a_proj.weight": "attention.wq_a.weight",
        "self_attn.q_a_layernorm.weight": "attention.q_norm.weight",
        "self_attn.q_b_proj.weight": "attention.wq_b.weight",
        "self_attn.kv_a_proj_with_mqa.weight": "attention.wkv_a.weight",
        "self_attn.kv_a_layernorm.weight": "attention.kv_norm.weight",
        "self_attn.kv_b_proj.weight": "attention.wkv_b.weight",
        "mlp.gate.weight": "moe.router.gate.weight",
        "mlp.gate.e_score_correction_bias": "moe.expert_bias",
    }
    sd = {}
    for k, v in sd_hf.items():
        for a, b in rename.items():
            if k.endswith(a):
                sd[k.replace("model.", "", 1).replace(a, b)] = v
    lay = resolve_layout(infos_of(sd), None, write(tmp_path, "[model]\nheads = 4\n"))
    assert lay.family == "torchtitan-mla"
    assert (lay.attention[0].head_dim, lay.attention[1].head_dim) == (NOPE, ROPE)  # inferred from shapes
    m_nope, _ = mla_reference(parts[1])
    wq, wk = load(lay.attention[2], sd)
    for j in range(H):
        torch.testing.assert_close(wq[j].T @ wk[j], m_nope[j], rtol=1e-4, atol=1e-3)
    assert lay.routers[1].routing == "sigmoid_bias"


def test_many_expert_tensors_resolve_fast():
    import time

    truth = heads(n_layers=4, seed=32)
    sd = hf_llama_sd(truth, extra=lambda i, p: {p + "mlp.gate.weight": torch.zeros(E, D)})
    infos = infos_of(sd)
    for i in range(4):  # ~100k expert tensors, headers only
        for e in range(8000):
            for w in ("gate_proj", "up_proj", "down_proj"):
                n = f"model.layers.{i}.mlp.experts.{e}.{w}.weight"
                infos[n] = TensorInfo(n, (16, D), "bfloat16", "model-00001.safetensors")
    t0 = time.perf_counter()
    lay = resolve_layout(infos, dict(LLAMA_CFG, model_type="qwen3_moe"))
    assert lay.family == "qwen-moe" and len(lay.routers) == 4
    assert time.perf_counter() - t0 < 10


def test_megatron_dist_stacked_layers():
    truth = heads(n_layers=3, seed=33)
    routers = [router_rows(110 + i) for i in range(3)]
    per_layer = megatron_sd(truth, routers)
    sd = {
        "decoder.layers.self_attention.linear_qkv.weight": torch.stack(
            [per_layer[f"decoder.layers.{i}.self_attention.linear_qkv.weight"] for i in range(3)]
        ),
        "decoder.layers.mlp.router.weight": torch.stack(routers),
        "decoder.layers.self_attention.linear_proj.weight": torch.zeros(3, D, H * HD),
        "embedding.word_embeddings.weight": torch.zeros(50, D),
    }
    lay = resolve_layout(infos_of(sd), {"num_attention_heads": H, "num_query_groups": G})
    assert lay.family == "megatron-core-dist"
    assert_attn(lay, truth, sd)
    assert [r.layer for r in lay.routers] == [0, 1, 2]
    torch.testing.assert_close(load(lay.routers[2], sd)[0], routers[2])


def test_load_reads_only_what_it_needs():
    truth = heads(seed=34)
    g = gen(35)
    sd = hf_llama_sd(
        truth,
        extra=lambda i, p: {
            p + "self_attn.q_norm.weight": rnd(HD, g=g),
            p + "self_attn.k_norm.weight": rnd(HD, g=g),
            p + "mlp.gate.weight": rnd(E, D, g=g),
        },
    )
    lay = resolve_layout(infos_of(sd), dict(LLAMA_CFG, model_type="qwen3_moe", head_dim=HD))
    rec = Recorder(sd)
    lay.attention[1].load(rec)
    assert sorted(rec.seen) == sorted(
        f"model.layers.1.self_attn.{r}.weight" for r in ("q_proj", "k_proj", "q_norm", "k_norm")
    )
    rec = Recorder(sd)
    lay.routers[0].load(rec)
    assert rec.seen == ["model.layers.0.mlp.gate.weight"]


# ------------------------------------------------------------------ the attention output projection


def _outs(lay):
    return {p.layer: p.tensors for p in lay.projections}


def test_output_projection_hf_gpt2_neox_and_stacked_megatron():
    """Each family names its attention output projection; a stacked tensor gives one layer's slice."""
    sd = hf_llama_sd(heads(seed=40))
    lay = resolve_layout(infos_of(sd), LLAMA_CFG)
    assert _outs(lay) == {i: (f"model.layers.{i}.self_attn.o_proj.weight",) for i in range(2)}
    g = gen(41)
    sd["model.layers.1.self_attn.o_proj.weight"] = w = rnd(D, H * HD, g=g)
    rec = Recorder(sd)
    (got,) = lay.projections[1].load(rec)
    assert rec.seen == ["model.layers.1.self_attn.o_proj.weight"]  # nothing else is read
    torch.testing.assert_close(got, w, rtol=0, atol=0)

    gpt2 = {f"h.{i}.attn.c_attn.weight": torch.zeros(D, 3 * D) for i in range(2)}
    gpt2.update({f"h.{i}.attn.c_proj.weight": torch.zeros(D, D) for i in range(2)})
    lay = resolve_layout(infos_of(gpt2), {"model_type": "gpt2", "n_head": H, "n_embd": D, "n_layer": 2})
    assert _outs(lay) == {i: (f"h.{i}.attn.c_proj.weight",) for i in range(2)}

    truth = heads(G=H, seed=42)
    neox = {
        f"gpt_neox.layers.{i}.attention.query_key_value.weight": neox_fuse(*t) for i, t in enumerate(truth)
    }
    neox["gpt_neox.layers.1.attention.dense.weight"] = torch.zeros(D, D)  # layer 0 has none: left out
    lay = resolve_layout(
        infos_of(neox), {"model_type": "gpt_neox", "num_attention_heads": H, "hidden_size": D}
    )
    assert _outs(lay) == {1: ("gpt_neox.layers.1.attention.dense.weight",)}

    truth = heads(n_layers=3, seed=43)
    per_layer = megatron_sd(truth)
    stack = rnd(3, D, H * HD, g=g)
    dist = {
        "decoder.layers.self_attention.linear_qkv.weight": torch.stack(
            [per_layer[f"decoder.layers.{i}.self_attention.linear_qkv.weight"] for i in range(3)]
        ),
        "decoder.layers.self_attention.linear_proj.weight": stack,
    }
    lay = resolve_layout(infos_of(dist), {"num_attention_heads": H, "num_query_groups": G})
    assert [p.layer for p in lay.projections] == [0, 1, 2]
    torch.testing.assert_close(load(lay.projections[2], dist)[0], stack[2], rtol=0, atol=0)


def test_output_projection_of_the_wrong_shape_is_left_out_with_a_note():
    sd = hf_llama_sd(heads(seed=44))
    sd["model.layers.0.self_attn.o_proj.weight"] = torch.zeros(D + 1, 7)
    lay = resolve_layout(infos_of(sd), LLAMA_CFG)
    assert [p.layer for p in lay.projections] == [1]
    assert any("o_proj.weight: shape [33, 7]" in n or "not an output projection" in n for n in lay.notes)
    assert lay.describe()["projections"] == [
        {"layer": 1, "block": "out", "tensors": ["model.layers.1.self_attn.o_proj.weight"]}
    ]
