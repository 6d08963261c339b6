"""Activation monitors vs slow, direct computations (materialised scores, full SVDs, float64)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ckptscan.monitors import REGISTRY
from ckptscan.monitors import activations as act
from ckptscan.monitors.activations import (
    RopeSpec,
    apply_rope,
    attention_activation_monitors,
    router_activation_monitors,
    routing_churn,
)

# ------------------------------------------------------------------------------------------------
# slow references


def ref_rope_half(x: torch.Tensor, theta: float, fraction: float = 1.0) -> torch.Tensor:
    """HF LLaMA / GPT-NeoX: cos/sin tables cat([ang, ang]); x*cos + rotate_half(x)*sin on the first dims."""
    t, h = x.shape[-2], x.shape[-1]
    rot = int(h * fraction)
    inv = 1.0 / (theta ** (torch.arange(0, rot, 2).double() / rot))
    ang = torch.outer(torch.arange(t).double(), inv)
    emb = torch.cat([ang, ang], dim=-1)
    cos, sin = emb.cos(), emb.sin()
    xr = x[..., :rot].double()

    def rotate_half(v):
        return torch.cat([-v[..., rot // 2 :], v[..., : rot // 2]], dim=-1)

    return torch.cat([xr * cos + rotate_half(xr) * sin, x[..., rot:].double()], dim=-1)


def ref_rope_interleaved(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Meta LLaMA: consecutive pairs as complex numbers times exp(i * pos * freq)."""
    t, h = x.shape[-2], x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, h, 2).double() / h))
    freqs = torch.polar(
        torch.ones(t, h // 2, dtype=torch.float64), torch.outer(torch.arange(t).double(), inv)
    )
    xc = torch.view_as_complex(x.double().reshape(*x.shape[:-1], h // 2, 2).contiguous())
    return torch.view_as_real(xc * freqs).flatten(-2)


def ref_entropy(sv: np.ndarray, alpha: float, r: int) -> float:
    sv = np.sort(sv)[::-1][:r]
    w = sv**alpha
    p = w / w.sum()
    p = p[p > 0]
    return float(-(p * np.log(p)).sum() / math.log(r))


def ref_attention(x, wq, wk, kv_index, rope=None, x_prev=None, wq_prev=None, wk_prev=None):
    """Everything materialised, per sequence and head, in float64 with numpy/torch SVD."""
    b_n, t_n, _ = x.shape
    n_heads, h, _ = wq.shape

    def proj(xb, w):
        v = xb.double() @ w.double().T
        if rope is None:
            return v
        if rope["style"] == "half":
            return ref_rope_half(v, rope["theta"], rope.get("fraction", 1.0))
        return ref_rope_interleaved(v, rope["theta"])

    out = {k: np.zeros(n_heads) for k in ("max", "emean", "emin", "s1", "s2", "d1", "d2", "tie")}
    for j in range(n_heads):
        g = int(kv_index[j])
        maxl, ents, ties, s1, s2, d1, d2 = -np.inf, [], 0, [], [], [], []
        for b in range(b_n):
            q, k = proj(x[b], wq[j]), proj(x[b], wk[g])
            s = (q @ k.T / math.sqrt(h)).numpy()
            for i in range(t_n):
                row = s[i, : i + 1]
                maxl = max(maxl, row.max())
                if i == 0:
                    continue
                p = np.exp(row - row.max())
                p /= p.sum()
                nz = p[p > 0]
                ents.append(-(nz * np.log(nz)).sum() / math.log(i + 1))
                ties += int((row >= row.max() - 1e-3).sum() >= 2)
            sv = np.linalg.svd(s, compute_uv=False)
            r = min(h, t_n)
            s1.append(ref_entropy(sv, 1.0, r))
            s2.append(ref_entropy(sv, 2.0, r))
            if x_prev is not None:
                qp, kp = proj(x_prev[b], wq_prev[j]), proj(x_prev[b], wk_prev[g])
                ds = ((q - qp) @ kp.T + qp @ (k - kp).T).numpy() / math.sqrt(h)
                svd = np.linalg.svd(ds, compute_uv=False)
                d1.append(ref_entropy(svd, 1.0, min(2 * h, t_n)))
                d2.append(ref_entropy(svd, 2.0, min(2 * h, t_n)))
        out["max"][j] = maxl
        out["emean"][j], out["emin"][j] = np.mean(ents), np.min(ents)
        out["tie"][j] = ties / (b_n * (t_n - 1))
        out["s1"][j], out["s2"][j] = np.mean(s1), np.mean(s2)
        out["d1"][j] = np.mean(d1) if d1 else np.nan
        out["d2"][j] = np.mean(d2) if d2 else np.nan
    return out


NAMES = {
    "max": "act.attn.max_logit",
    "emean": "act.attn.entropy_mean",
    "emin": "act.attn.entropy_min",
    "s1": "act.attn.S.entropy1",
    "s2": "act.attn.S.entropy2",
    "d1": "act.attn.dS.entropy1",
    "d2": "act.attn.dS.entropy2",
    "tie": "act.attn.tie_ratio",
}


def _inputs(seed, b=2, t=12, d=24, n_heads=4, n_kv=2, h=4):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, d, generator=g)
    wq = torch.randn(n_heads, h, d, generator=g) * 0.3
    wk = torch.randn(n_kv, h, d, generator=g) * 0.3
    x_prev = x + 0.05 * torch.randn(b, t, d, generator=g)
    wq_prev = wq + 0.02 * torch.randn(wq.shape, generator=g)
    wk_prev = wk + 0.02 * torch.randn(wk.shape, generator=g)
    kv_index = torch.arange(n_heads) // (n_heads // n_kv)
    return x, wq, wk, kv_index, x_prev, wq_prev, wk_prev


def _compare(got, ref, skip=()):
    for key, name in NAMES.items():
        if key in skip:
            continue
        np.testing.assert_allclose(got[name].numpy(), ref[key], rtol=1e-4, atol=1e-6, err_msg=name)


# ------------------------------------------------------------------------------------------------
# attention


@pytest.mark.parametrize(
    "rope",
    [
        None,
        {"theta": 100.0, "style": "half"},
        {"theta": 50.0, "style": "interleaved"},
        {"theta": 100.0, "style": "half", "fraction": 0.5},
    ],
)
def test_attention_monitors_match_direct_computation(rope):
    x, wq, wk, kv, xp, wqp, wkp = _inputs(0)
    got = attention_activation_monitors(x, wq, wk, kv, rope=rope, x_prev=xp, wq_prev=wqp, wk_prev=wkp)
    ref = ref_attention(x, wq, wk, kv, rope, xp, wqp, wkp)
    assert all(v.shape == (4,) for v in got.values())
    _compare(got, ref)


def test_attention_monitors_long_sequence_rank_limited():
    """T > 2h: the spectra of S (rank h) and dS (rank 2h) come from the low-rank cores."""
    x, wq, wk, kv, xp, wqp, wkp = _inputs(1, b=1, t=20, d=16, n_heads=2, n_kv=1, h=4)
    rope = {"theta": 10000.0, "style": "half"}
    got = attention_activation_monitors(x, wq, wk, kv, rope=rope, x_prev=xp, wq_prev=wqp, wk_prev=wkp)
    _compare(got, ref_attention(x, wq, wk, kv, rope, xp, wqp, wkp))


def test_head_chunking_does_not_change_results(monkeypatch):
    x, wq, wk, kv, xp, wqp, wkp = _inputs(2)
    full = attention_activation_monitors(x, wq, wk, kv, x_prev=xp, wq_prev=wqp, wk_prev=wkp)
    monkeypatch.setattr(act, "_SCORE_BUDGET", 1)  # one head per block
    chunked = attention_activation_monitors(x, wq, wk, kv, x_prev=xp, wq_prev=wqp, wk_prev=wkp)
    for name in full:
        torch.testing.assert_close(chunked[name], full[name], equal_nan=True)


def test_without_prev_the_increment_is_nan_and_partial_prev_is_refused():
    x, wq, wk, kv, xp, _, _ = _inputs(3)
    got = attention_activation_monitors(x, wq, wk, kv)
    assert torch.isnan(got["act.attn.dS.entropy2"]).all() and torch.isnan(got["act.attn.dS.entropy1"]).all()
    assert torch.isfinite(got["act.attn.S.entropy2"]).all()
    with pytest.raises(ValueError):
        attention_activation_monitors(x, wq, wk, kv, x_prev=xp)


def test_constant_tokens_give_uniform_attention_and_full_ties():
    """Identical hidden states at every position (no RoPE): every visible logit is equal."""
    x, wq, wk, kv, *_ = _inputs(4)
    x = x[:, :1].expand(-1, 12, -1).contiguous()
    got = attention_activation_monitors(x, wq, wk, kv)
    torch.testing.assert_close(got["act.attn.tie_ratio"], torch.ones(4, dtype=torch.float64))
    torch.testing.assert_close(got["act.attn.entropy_mean"], torch.ones(4, dtype=torch.float64))
    torch.testing.assert_close(got["act.attn.entropy_min"], torch.ones(4, dtype=torch.float64))
    # a rank-one score matrix: spectral entropy 0
    torch.testing.assert_close(
        got["act.attn.S.entropy2"], torch.zeros(4, dtype=torch.float64), atol=1e-6, rtol=0
    )


def test_without_rope_max_logit_is_plain_bilinear_form():
    x, wq, wk, kv, *_ = _inputs(5)
    got = attention_activation_monitors(x, wq, wk, kv, rope=None)
    h = wq.shape[1]
    causal = torch.ones(12, 12, dtype=torch.bool).tril()
    for j in range(4):
        s = (x.double() @ wq[j].double().T) @ (x.double() @ wk[kv[j]].double().T).mT / math.sqrt(h)
        assert got["act.attn.max_logit"][j].item() == pytest.approx(s[:, causal].max().item(), rel=1e-5)


# ------------------------------------------------------------------------------------------------
# RoPE


def test_rope_half_matches_hf_rotate_half_and_drill_model():
    from ckptscan.drills.model import TinyConfig, rope_tables
    from ckptscan.drills.model import apply_rope as drill_apply

    x = torch.randn(3, 10, 16)
    got = apply_rope(x, RopeSpec(theta=500.0))
    torch.testing.assert_close(got.double(), ref_rope_half(x, 500.0), rtol=1e-5, atol=1e-5)
    cos, sin = rope_tables(TinyConfig(head_dim=16, rope_theta=500.0, max_seq=10))
    torch.testing.assert_close(got, drill_apply(x, cos, sin), rtol=1e-5, atol=1e-5)


def test_rope_interleaved_and_partial_match_references():
    x = torch.randn(2, 9, 8)
    torch.testing.assert_close(
        apply_rope(x, RopeSpec(theta=77.0, style="interleaved")).double(),
        ref_rope_interleaved(x, 77.0),
        rtol=1e-5,
        atol=1e-5,
    )
    got = apply_rope(x, RopeSpec(theta=77.0, fraction=0.5))
    torch.testing.assert_close(got.double(), ref_rope_half(x, 77.0, 0.5), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[..., 4:], x[..., 4:])  # the non-rotary dims are untouched


@pytest.mark.parametrize("style", ["half", "interleaved"])
def test_rope_scores_depend_on_relative_position_only(style):
    """The defining property of RoPE: <R_m q, R_n k> depends on n - m only."""
    q, k = torch.randn(8).double(), torch.randn(8).double()
    seq_q = q.expand(12, 8).contiguous()
    seq_k = k.expand(12, 8).contiguous()
    rq, rk = (
        apply_rope(seq_q, RopeSpec(theta=30.0, style=style)),
        apply_rope(seq_k, RopeSpec(theta=30.0, style=style)),
    )
    s = rq @ rk.T
    for shift in range(1, 5):
        torch.testing.assert_close(s[shift, 0], s[shift + 3, 3])
    assert not torch.allclose(s[1, 0], s[2, 0])


def test_rope_spec_accepts_config_like_objects():
    from ckptscan.layouts.base import ModelConfig

    spec = RopeSpec.of(ModelConfig(rope_theta=1e6, partial_rotary_factor=0.25))
    assert spec == RopeSpec(theta=1e6, fraction=0.25, style="half")
    assert RopeSpec.of(ModelConfig(uses_rope=False)) is None
    with pytest.raises(ValueError):
        RopeSpec.of({"style": "sideways"})


# ------------------------------------------------------------------------------------------------
# router


def ref_router(z: np.ndarray, routing: str, k: int, bias=None):
    """Direct numpy computation of every router monitor for logits z [N, E]."""
    n, e = z.shape
    if routing == "sigmoid_bias":
        s = 1 / (1 + np.exp(-z))
        p = s / s.sum(1, keepdims=True)
        sel = s + (bias if bias is not None else 0)
    else:
        ez = np.exp(z - z.max(1, keepdims=True))
        p = ez / ez.sum(1, keepdims=True)
        sel = p if routing == "softmax_topk" else z
    order = np.argsort(-sel, axis=1, kind="stable")
    idx = order[:, :k]
    ent = np.array([-(row[row > 0] * np.log(row[row > 0])).sum() / math.log(e) for row in p])
    load = np.zeros(e)
    for row in idx:
        for ex in row:
            load[ex] += 1
    load /= n * k
    lz = load[load > 0]
    margin_src = p if routing != "sigmoid_bias" else sel
    srt = -np.sort(-margin_src, axis=1)
    lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
    return idx, {
        "act.router.entropy_mean": ent.mean(),
        "act.router.entropy_p10": np.quantile(ent, 0.1),
        "act.router.entropy_p50": np.quantile(ent, 0.5),
        "act.router.entropy_p90": np.quantile(ent, 0.9),
        "act.router.load_entropy": -(lz * np.log(lz)).sum() / math.log(e),
        "act.router.load_cv": load.std() / load.mean(),
        "act.router.max_share": load.max(),
        "act.router.dead_experts": float((load == 0).sum()),
        "act.router.topk_margin": (srt[:, k - 1] - srt[:, k]).mean(),
        "act.router.z_loss": (lse**2).mean(),
    }


@pytest.mark.parametrize("routing", ["softmax_topk", "topk_softmax", "sigmoid_bias"])
def test_router_monitors_match_direct_computation(routing):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 20, 16, generator=g)
    w = torch.randn(8, 16, generator=g) * 0.5
    bias = torch.randn(8, generator=g) * 0.3
    got, idx = router_activation_monitors(x, w=w, bias=bias, routing=routing, top_k=2)
    z = (x.reshape(-1, 16).double() @ w.double().T).numpy()
    if routing != "sigmoid_bias":
        z = z + bias.double().numpy()  # a router linear's bias (GPT-OSS); DeepSeek's is for selection only
    ref_idx, ref = ref_router(z, routing, 2, bias.double().numpy() if routing == "sigmoid_bias" else None)
    assert idx.shape == (60, 2)
    assert (np.sort(idx.numpy(), 1) == np.sort(ref_idx, 1)).all()
    for name, value in ref.items():
        assert got[name].shape == (1,)
        assert got[name].item() == pytest.approx(value, rel=1e-4, abs=1e-6), name
    assert torch.isnan(got["act.router.churn_prev"]).all()


def test_recorded_logits_give_the_same_result_as_router_input():
    x, w = torch.randn(2, 10, 16), torch.randn(6, 16)
    from_x, idx_x = router_activation_monitors(x, w=w, top_k=2)
    from_z, idx_z = router_activation_monitors(x @ w.T, top_k=2)
    assert torch.equal(idx_x, idx_z)
    for name in from_x:
        torch.testing.assert_close(from_x[name], from_z[name], equal_nan=True, rtol=1e-5, atol=1e-6)


def test_sigmoid_bias_selects_with_the_bias():
    z = torch.zeros(5, 4)
    z[:, 1] = 2.0
    bias = torch.tensor([10.0, 0.0, 0.0, 0.0])
    _, idx = router_activation_monitors(z, bias=bias, routing="sigmoid_bias", top_k=1)
    assert (idx[:, 0] == 0).all()
    _, idx = router_activation_monitors(z, routing="sigmoid_bias", top_k=1)
    assert (idx[:, 0] == 1).all()


def test_dead_experts_and_load_shares():
    z = torch.randn(40, 5)
    z[:, 4] = -100.0  # never chosen
    got, _ = router_activation_monitors(z, top_k=2)
    assert got["act.router.dead_experts"].item() == 1
    assert got["act.router.max_share"].item() >= 0.25 - 1e-12  # 4 live experts share 100% of the slots


def test_routing_churn():
    a = torch.tensor([[0, 1], [2, 3], [4, 5]])
    assert routing_churn(a, a) == 0.0
    assert routing_churn(a, a.flip(1)) == 0.0  # order within a token does not matter
    assert routing_churn(a, torch.tensor([[6, 7], [0, 1], [2, 3]])) == 1.0
    assert routing_churn(a, torch.tensor([[1, 2], [2, 3], [4, 0]])) == pytest.approx(1 - (1 + 2 + 1) / 6)
    with pytest.raises(ValueError):
        routing_churn(a, a[:2])


def test_churn_prev_through_the_monitor():
    z = torch.randn(30, 6)
    _, idx = router_activation_monitors(z, top_k=2)
    same, _ = router_activation_monitors(z, top_k=2, prev_topk=idx)
    assert same["act.router.churn_prev"].item() == 0.0
    other, _ = router_activation_monitors(-z, top_k=2, prev_topk=idx)  # best experts become the worst
    assert other["act.router.churn_prev"].item() == 1.0


def test_every_series_is_registered():
    x, wq, wk, kv, *_ = _inputs(8)
    names = set(attention_activation_monitors(x, wq, wk, kv))
    names |= set(router_activation_monitors(torch.randn(10, 4), top_k=2)[0]) | {"act.router.churn_final"}
    for name in names:
        spec = REGISTRY[name]
        assert spec.family == ("act_attention" if name.startswith("act.attn.") else "act_router")
        assert spec.scope == ("head" if name.startswith("act.attn.") else "layer")
        assert spec.kind == ("pair" if ".dS." in name or "churn" in name else "single")


def test_tie_ratio_threshold_is_1e3_on_scaled_logits():
    """d = h = 1, Wq = Wk = 1: S[i, j] = x_i x_j.  Row 1 has a 5e-4 gap (a tie), row 2 a 2.5e-3 gap (none)."""
    x = torch.tensor([1.0, 1.0005, 1.003]).reshape(1, 3, 1)
    one = torch.ones(1, 1, 1)
    got = attention_activation_monitors(x, one, one, torch.zeros(1, dtype=torch.long))
    assert got["act.attn.tie_ratio"].item() == 0.5
    assert got["act.attn.max_logit"].item() == pytest.approx(1.003**2, rel=1e-6)
