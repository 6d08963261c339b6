"""Activation-side monitors: attention scores and router decisions on the replay batch.

Inputs come from a replay file (``ckptscan.replay.contract``): ``x`` [B, T, d] is the normalised hidden state
entering a layer's projections (or its router), recorded for the same tokens at every checkpoint.
Weights follow the layout convention (``wq`` [H, h, d], ``wk`` [G, h, d], router ``w`` [E, d]).

Attention (docs/monitors.md, activation side), per sequence b and query head j:

    Q_j = X_b Wq_j^T,  K_g = X_b Wk_g^T  (RoPE at positions 0..T-1 when given)
    S_j = Q_j K_g^T / sqrt(h)            [T, T]

Choices that are ours (documented in docs/replay.md):

* Entropies are per causal row, normalised by log(row length) so that rows of different lengths are
  comparable and 1 means uniform attention over the visible keys; row 0 (a single key, no choice) is
  excluded.  ``entropy_mean`` / ``entropy_min`` are the mean / min over rows 1..T-1 of every sequence.
* The spectral entropies of S use the *unmasked* Q K^T / sqrt(h), whose rank is <= h, so the QR core
  trick of ``ckptscan.monitors.linalg`` applies (the causal mask would make S full rank and need a T x T SVD).
  They are computed per sequence and averaged over sequences.  The increment's first-order term is
  dQ K^T + Q dK^T = [dQ, Q_prev] [K_prev, dK]^T (rank <= 2h), with Q_prev, K_prev from the previous
  checkpoint's activations and weights on the same tokens, dQ = Q(t) - Q(t-1).
* ``tie_ratio``: fraction of causal rows with >= 2 keys whose logits (after the 1/sqrt(h) scaling)
  have at least two values within 1e-3 of the row max.

Memory: scores are formed for one sequence and a chunk of heads at a time, sized so one [heads, T, T]
float32 block holds about ``_SCORE_BUDGET`` elements (32 MiB); peak use is a few such blocks.

Router (section 3): see ``router_activation_monitors``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypedDict

import torch

from ckptscan.layouts.base import ROUTINGS
from ckptscan.monitors.linalg import lowrank_sq_singular_values, spectral_entropy
from ckptscan.monitors.registry import register

_SCORE_BUDGET = 1 << 23  # elements of one [heads, T, T] score block (32 MiB in float32)
TIE_TOL = 1e-3

# --------------------------------------------------------------------------------------------------
# registry

_A, _R = "act_attention", "act_router"
register(
    "act.attn.max_logit",
    _A,
    "head",
    "single",
    "up",
    "max causal attention logit q.k/sqrt(h) over the replay batch (logit growth, Wortsman et al.)",
)
register(
    "act.attn.entropy_mean",
    _A,
    "head",
    "single",
    "down",
    "mean over causal rows 1..T-1 of attention entropy / log(row length) (entropy collapse, Zhai et al.)",
)
register(
    "act.attn.entropy_min",
    _A,
    "head",
    "single",
    "down",
    "min over causal rows 1..T-1 of attention entropy / log(row length)",
)
register(
    "act.attn.S.entropy1",
    _A,
    "head",
    "single",
    "both",
    "spectral entropy (alpha=1) of the unmasked score matrix Q K^T/sqrt(h) per sequence, / log h, mean over sequences",
)
register(
    "act.attn.S.entropy2",
    _A,
    "head",
    "single",
    "down",
    "spectral entropy (alpha=2) of the unmasked score matrix Q K^T/sqrt(h) per sequence, / log h, mean over sequences",
)
register(
    "act.attn.dS.entropy1",
    _A,
    "head",
    "pair",
    "down",
    "spectral entropy (alpha=1) of the score increment's first-order term dQ K^T + Q dK^T, / log 2h, "
    "mean over sequences",
)
register(
    "act.attn.dS.entropy2",
    _A,
    "head",
    "pair",
    "down",
    "spectral entropy (alpha=2) of the score increment's first-order term dQ K^T + Q dK^T, / log 2h, "
    "mean over sequences",
)
register(
    "act.attn.tie_ratio",
    _A,
    "head",
    "single",
    "up",
    "fraction of causal rows (>= 2 keys) with two or more logits within 1e-3 of the row max (Qiu & Yao 2025)",
)

register(
    "act.router.entropy_mean",
    _R,
    "layer",
    "single",
    "both",
    "mean per-token routing entropy H(p_t) / log E over the replay tokens",
)
register(
    "act.router.entropy_p10",
    _R,
    "layer",
    "single",
    "both",
    "10th percentile of per-token routing entropy / log E",
)
register("act.router.entropy_p50", _R, "layer", "single", "both", "median per-token routing entropy / log E")
register(
    "act.router.entropy_p90",
    _R,
    "layer",
    "single",
    "both",
    "90th percentile of per-token routing entropy / log E",
)
register(
    "act.router.load_entropy",
    _R,
    "layer",
    "single",
    "down",
    "entropy of the expert load (fraction of top-k slots per expert) / log E",
)
register("act.router.load_cv", _R, "layer", "single", "up", "coefficient of variation of the expert load")
register("act.router.max_share", _R, "layer", "single", "up", "largest expert's share of the top-k slots")
register(
    "act.router.dead_experts", _R, "layer", "single", "up", "number of experts that receive no top-k slot"
)
register(
    "act.router.topk_margin",
    _R,
    "layer",
    "single",
    "down",
    "mean gap between the k-th and (k+1)-th selection score (probability) per token",
)
register("act.router.z_loss", _R, "layer", "single", "up", "mean logsumexp(z_t)^2 of the router logits")
register(
    "act.router.churn_prev",
    _R,
    "layer",
    "pair",
    "up",
    "routing churn vs the previous checkpoint: 1 - mean |topk_t(step) & topk_t(prev)| / k",
)
register(
    "act.router.churn_final",
    _R,
    "layer",
    "pair",
    "up",
    "routing churn vs the final checkpoint: 1 - mean |topk_t(step) & topk_t(final)| / k (router saturation)",
)


# --------------------------------------------------------------------------------------------------
# RoPE


@dataclass(frozen=True)
class RopeSpec:
    """Rotary embedding as applied to q and k: ``theta`` base, ``fraction`` of each head's dims rotated
    (the first ``fraction * h``), ``style`` "half" (HF rotate_half, dims i and i + r/2 paired) or
    "interleaved" (Meta/torchtitan, dims 2i and 2i+1 paired).  Scaled RoPE variants (llama3, YaRN) are
    not modelled: positions 0..T-1 of a short replay batch are mostly inside the unscaled band."""

    theta: float = 10000.0
    fraction: float = 1.0
    style: str = "half"

    @classmethod
    def of(cls, rope: Any) -> RopeSpec | None:
        """Accept a RopeSpec, a dict, or an object (e.g. ``layouts.base.ModelConfig``) describing RoPE."""
        if rope is None or isinstance(rope, RopeSpec):
            return rope

        def get(*names, default=None):
            for n in names:
                v = rope.get(n) if isinstance(rope, dict) else getattr(rope, n, None)
                if v is not None:
                    return v
            return default

        if get("uses_rope", default=True) is False:
            return None
        spec = cls(
            theta=float(get("theta", "rope_theta", default=10000.0)),
            fraction=float(get("fraction", "rotary_fraction", "partial_rotary_factor", default=1.0)),
            style=str(get("style", "rope_style", default="half")),
        )
        if spec.style not in ("half", "interleaved"):
            raise ValueError(f"RoPE style must be 'half' or 'interleaved', got {spec.style!r}")
        return spec


def apply_rope(x: torch.Tensor, rope: RopeSpec) -> torch.Tensor:
    """Rotate ``x`` [..., T, h] at positions 0..T-1 (in float32 or the input's float dtype)."""
    t, h = x.shape[-2], x.shape[-1]
    rot = int(h * rope.fraction)
    rot -= rot % 2
    if rot == 0:
        return x
    inv = 1.0 / (rope.theta ** (torch.arange(0, rot, 2, dtype=torch.float64, device=x.device) / rot))
    ang = torch.arange(t, dtype=torch.float64, device=x.device)[:, None] * inv[None, :]  # [T, rot/2]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    xr, rest = x[..., :rot], x[..., rot:]
    if rope.style == "half":
        a, b = xr[..., : rot // 2], xr[..., rot // 2 :]
        out = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
    else:
        a, b = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)
    return torch.cat([out, rest], dim=-1)


# --------------------------------------------------------------------------------------------------
# attention


class _TensorOptions(TypedDict):
    """Keyword arguments of torch's tensor factories (``torch.full(..., **opts)``)."""

    dtype: torch.dtype
    device: torch.device


def _project(x_b: torch.Tensor, w: torch.Tensor, rope: RopeSpec | None) -> torch.Tensor:
    """x_b [T, d] and w [N, h, d] -> per-head projections [N, T, h] (RoPE applied when given)."""
    n, h, d = w.shape
    out = (x_b @ w.reshape(n * h, d).mT).reshape(x_b.shape[0], n, h).permute(1, 0, 2)
    return apply_rope(out, rope) if rope is not None else out


def attention_activation_monitors(
    x: torch.Tensor,
    wq: torch.Tensor,
    wk: torch.Tensor,
    kv_index: torch.Tensor,
    rope: Any = None,
    x_prev: torch.Tensor | None = None,
    wq_prev: torch.Tensor | None = None,
    wk_prev: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Attention monitors of one layer on the replay batch, each a float64 tensor [H].

    ``x`` [B, T, d] float32; ``wq`` [H, h, d], ``wk`` [G, h, d]; ``kv_index`` [H] (query head j reads
    key head kv_index[j]); ``rope`` None (no RoPE) or a ``RopeSpec``/dict/config object.  The ``*_prev``
    arguments (all three or none) are the previous checkpoint's activations on the same tokens and its
    weights; without them ``act.attn.dS.*`` are NaN.
    """
    if x.ndim != 3 or wq.ndim != 3 or wk.ndim != 3:
        raise ValueError(
            f"expected x [B,T,d], wq [H,h,d], wk [G,h,d]; got {tuple(x.shape)}, "
            f"{tuple(wq.shape)}, {tuple(wk.shape)}"
        )
    b_n, t_n, d = x.shape
    n_heads, h, _ = wq.shape
    if wq.shape[-1] != d or wk.shape[-1] != d or wk.shape[1] != h:
        raise ValueError(f"shape mismatch: x {tuple(x.shape)}, wq {tuple(wq.shape)}, wk {tuple(wk.shape)}")
    given = [p is not None for p in (x_prev, wq_prev, wk_prev)]
    if any(given) and not all(given):
        raise ValueError("x_prev, wq_prev and wk_prev must be given together")
    prev: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    if x_prev is not None and wq_prev is not None and wk_prev is not None:
        if x_prev.shape != x.shape or wq_prev.shape != wq.shape or wk_prev.shape != wk.shape:
            raise ValueError("previous activations/weights differ in shape from the current ones")
        prev = (x_prev, wq_prev, wk_prev)
    rope = RopeSpec.of(rope)
    dev = x.device
    x = x.float()
    wq, wk = wq.to(dev, torch.float32), wk.to(dev, torch.float32)
    kv_index = kv_index.to(dev, torch.long)
    if prev is not None:
        prev = (
            prev[0].to(dev, torch.float32),
            prev[1].to(dev, torch.float32),
            prev[2].to(dev, torch.float32),
        )

    scale = 1.0 / math.sqrt(h)
    chunk = max(1, min(n_heads, _SCORE_BUDGET // max(1, t_n * t_n)))
    causal = torch.ones(t_n, t_n, dtype=torch.bool, device=dev).tril()
    lengths = torch.arange(1, t_n + 1, dtype=torch.float64, device=dev)
    rows = slice(1, None)  # row 0 has a single key: no choice, excluded from entropies and ties
    n_rows = b_n * (t_n - 1)

    f64: _TensorOptions = {"dtype": torch.float64, "device": dev}
    max_logit = torch.full((n_heads,), -math.inf, **f64)
    ent_sum = torch.zeros(n_heads, **f64)
    ent_min = torch.full((n_heads,), math.inf, **f64)
    ties = torch.zeros(n_heads, **f64)
    s_ent = {a: torch.zeros(b_n, n_heads, **f64) for a in (1.0, 2.0)}
    ds_ent = {a: torch.full((b_n, n_heads), math.nan, **f64) for a in (1.0, 2.0)}

    for b in range(b_n):
        q_all = _project(x[b], wq, rope) * scale  # [H, T, h], the 1/sqrt(h) folded into Q
        k_all = _project(x[b], wk, rope)  # [G, T, h]
        if prev is not None:
            x_p, wq_p, wk_p = prev
            q_prev = _project(x_p[b], wq_p, rope) * scale
            k_prev = _project(x_p[b], wk_p, rope)
        for j0 in range(0, n_heads, chunk):
            js = slice(j0, min(n_heads, j0 + chunk))
            q = q_all[js]
            k = k_all.index_select(0, kv_index[js])
            s = q @ k.mT  # [c, T, T]
            s = s.masked_fill(~causal, -math.inf)
            row_max = s.amax(-1)  # [c, T]
            max_logit[js] = torch.maximum(max_logit[js], row_max.amax(-1).double())
            if t_n > 1:
                logp = torch.log_softmax(s, dim=-1)
                ent = -(logp.exp() * logp.masked_fill(~causal, 0.0)).sum(-1).double()  # [c, T], nats
                ent = ent[:, rows] / lengths[rows].log()
                ent_sum[js] += ent.sum(-1)
                ent_min[js] = torch.minimum(ent_min[js], ent.amin(-1))
                del logp
                near = (s >= (row_max - TIE_TOL).unsqueeze(-1)).sum(-1)  # masked entries are -inf: never near
                ties[js] += (near[:, rows] >= 2).sum(-1).double()
            del s
            # spectra of the unmasked score matrix and of its increment, through r x r cores
            sv2 = lowrank_sq_singular_values(q, k)
            for a in (1.0, 2.0):
                s_ent[a][b, js] = spectral_entropy(sv2, a)
            if prev is not None:
                qp = q_prev[js]
                kp = k_prev.index_select(0, kv_index[js])
                a_mat = torch.cat([q - qp, qp], dim=-1)  # [c, T, 2h]
                b_mat = torch.cat([kp, k - kp], dim=-1)
                dv2 = lowrank_sq_singular_values(a_mat, b_mat)
                for a in (1.0, 2.0):
                    ds_ent[a][b, js] = spectral_entropy(dv2, a)

    nan = torch.full((n_heads,), math.nan, **f64)
    return {
        "act.attn.max_logit": max_logit,
        "act.attn.entropy_mean": ent_sum / n_rows if n_rows else nan,
        "act.attn.entropy_min": ent_min if n_rows else nan,
        "act.attn.S.entropy1": s_ent[1.0].nanmean(0),
        "act.attn.S.entropy2": s_ent[2.0].nanmean(0),
        "act.attn.dS.entropy1": ds_ent[1.0].nanmean(0),
        "act.attn.dS.entropy2": ds_ent[2.0].nanmean(0),
        "act.attn.tie_ratio": ties / n_rows if n_rows else nan,
    }


# --------------------------------------------------------------------------------------------------
# router


def routing_scores(z: torch.Tensor, bias: torch.Tensor | None, routing: str, top_k: int):
    """From logits z [N, E]: (p [N, E] the routing distribution over all experts, selection scores
    [N, E] whose top-k are the chosen experts, topk indices [N, k], gate weights [N, k])."""
    if routing == "softmax_topk":  # Mixtral, Qwen-MoE, OLMoE: softmax over E, top-k, renormalise
        p = torch.softmax(z, dim=-1)
        sel = p
        w, idx = p.topk(top_k, dim=-1)
        w = w / w.sum(-1, keepdim=True)
    elif routing == "topk_softmax":  # GPT-OSS: top-k logits, softmax over the k
        p = torch.softmax(z, dim=-1)
        sel = p  # same order as z
        top, idx = z.topk(top_k, dim=-1)
        w = torch.softmax(top, dim=-1)
    elif routing == "sigmoid_bias":  # DeepSeek-V3: sigmoid scores, selection with the correction bias
        s = torch.sigmoid(z)
        p = s / s.sum(-1, keepdim=True)
        sel = s + bias if bias is not None else s
        idx = sel.topk(top_k, dim=-1).indices
        w = s.gather(-1, idx)
        w = w / w.sum(-1, keepdim=True)
    else:
        raise ValueError(f"unknown routing rule {routing!r}; expected one of {ROUTINGS}")
    return p, sel, idx, w


def routing_churn(topk_a: torch.Tensor, topk_b: torch.Tensor) -> float:
    """1 - mean over tokens of |topk_a[t] & topk_b[t]| / k: 0 = same experts, 1 = disjoint.

    ``topk_a``, ``topk_b`` [N, k] expert indices for the same N tokens (distinct within a row).
    """
    if topk_a.shape != topk_b.shape or topk_a.ndim != 2:
        raise ValueError(
            f"top-k index shapes differ or are not [N, k]: {tuple(topk_a.shape)} vs {tuple(topk_b.shape)}"
        )
    if topk_a.numel() == 0:
        return math.nan
    b = topk_b.to(topk_a.device)
    overlap = (topk_a[:, :, None] == b[:, None, :]).any(-1).sum(-1).double()
    return float(1.0 - overlap.mean() / topk_a.shape[1])


def router_activation_monitors(
    logits_or_x: torch.Tensor,
    w: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    routing: str = "softmax_topk",
    top_k: int = 2,
    prev_topk: torch.Tensor | None = None,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Router monitors of one layer on the replay tokens: ({name: float64 tensor [1]}, topk [N, k]).

    ``logits_or_x``: router logits [..., E] (recorded ``router_logits``; ``w`` None) or the router
    input [..., d] with ``w`` [E, d].  ``bias`` [E]: for "sigmoid_bias" the selection correction bias
    (always); otherwise a router-linear bias added to the logits computed here from x (GPT-OSS) and
    ignored with recorded logits (which already include it).  ``prev_topk`` [N, k]: the previous
    checkpoint's top-k on the same tokens, for ``act.router.churn_prev`` (NaN without it).
    ``act.router.churn_final`` is left to the caller (``routing_churn`` against the final top-k).
    """
    if routing not in ROUTINGS:
        raise ValueError(f"unknown routing rule {routing!r}; expected one of {ROUTINGS}")
    z = logits_or_x.float()
    z = z.reshape(-1, z.shape[-1])
    if w is not None:
        w = w.to(z.device, torch.float32)
        if w.shape[-1] != z.shape[-1]:
            raise ValueError(f"router input has d={z.shape[-1]}, router weight {tuple(w.shape)}")
        z = z @ w.mT
        if bias is not None and routing != "sigmoid_bias":
            z = z + bias.to(z.device, torch.float32)
    n, e = z.shape
    if not 1 <= top_k <= e:
        raise ValueError(f"top_k={top_k} with {e} experts")
    sel_bias = bias.to(z.device, torch.float32) if (bias is not None and routing == "sigmoid_bias") else None
    p, sel, idx, _ = routing_scores(z, sel_bias, routing, top_k)

    p64 = p.double()
    plogp = torch.where(p64 > 0, p64 * p64.log(), torch.zeros((), dtype=torch.float64, device=z.device))
    tok_ent = -plogp.sum(-1) / math.log(e) if e > 1 else torch.zeros(n, dtype=torch.float64, device=z.device)
    q = torch.quantile(tok_ent, torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64, device=z.device))

    load = torch.bincount(idx.reshape(-1), minlength=e).double() / (n * top_k)  # sums to 1
    load_ent = (
        -torch.where(load > 0, load * load.log(), torch.zeros_like(load)).sum() / math.log(e)
        if e > 1
        else torch.zeros((), dtype=torch.float64)
    )
    if top_k < e:
        srt = sel.double().topk(top_k + 1, dim=-1).values
        margin = (srt[:, top_k - 1] - srt[:, top_k]).mean()
    else:
        margin = torch.tensor(math.nan, dtype=torch.float64)
    churn = routing_churn(idx, prev_topk) if prev_topk is not None else math.nan

    def one(v) -> torch.Tensor:
        return torch.as_tensor(v, dtype=torch.float64).reshape(1).cpu()

    out = {
        "act.router.entropy_mean": one(tok_ent.mean()),
        "act.router.entropy_p10": one(q[0]),
        "act.router.entropy_p50": one(q[1]),
        "act.router.entropy_p90": one(q[2]),
        "act.router.load_entropy": one(load_ent),
        "act.router.load_cv": one(load.std(correction=0) / load.mean()),
        "act.router.max_share": one(load.max()),
        "act.router.dead_experts": one((load == 0).sum()),
        "act.router.topk_margin": one(margin),
        "act.router.z_loss": one((torch.logsumexp(z.double(), dim=-1) ** 2).mean()),
        "act.router.churn_prev": one(churn),
    }
    return out, idx
