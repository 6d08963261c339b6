"""A tiny LLaMA-style decoder (RMSNorm, RoPE, SwiGLU, GQA, optional top-k MoE) in plain torch.

Attention is written out (no fused kernel) as an ``autograd.Function`` whose backward follows
FlashAttention-2's recipe, so that the low-precision fault can be injected exactly where it lives:
the row term ``D = rowsum(dO * O)`` (see ``LowPrecAttention``).  Module names mirror HF LLaMA so that
dense state dicts need no renaming; MoE blocks are renamed to Mixtral / Qwen2-MoE by ``naming.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class TinyConfig:
    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 16
    ffn: int = 128  # dense SwiGLU width, or per-expert width for MoE
    n_experts: int = 0  # 0 = dense MLP
    top_k: int = 2
    vocab: int = 256
    max_seq: int = 256
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def moe(self) -> bool:
        return self.n_experts > 0


# ---------------------------------------------------------------------------------------------
# fault: low-precision O in the attention backward


@dataclass
class LowPrecFault:
    """Emulation of the bf16 flash-attention failure (Qiu & Yao 2025, arXiv 2510.04212).

    ``O_eff = O + amplification * (trunc_bits(O) - O)``: O truncated toward zero to ``mantissa_bits``
    explicit mantissa bits (7 = bf16), and the (biased) truncation error scaled by ``amplification``.
    ``amplification = 1`` is a faithful bf16-truncation emulation.
    """

    mantissa_bits: int = 7
    amplification: float = 1.0
    active: bool = False


def truncate_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Round float32 ``x`` toward zero to ``bits`` explicit mantissa bits (biased, like truncation)."""
    if bits >= 23:
        return x
    mask = -(1 << (23 - bits))  # ones in sign+exponent+top mantissa bits (two's complement int32)
    return (x.contiguous().view(torch.int32) & mask).view(torch.float32)


class LowPrecAttention(torch.autograd.Function):
    """Causal softmax attention; backward as in FlashAttention-2 with D computed from a low-precision O.

    Backward (per row i): dV = P^T dO, dP = dO V^T, D_i = sum_d dO_id * O_id, dS = P * (dP - D),
    dQ = dS K / sqrt(h), dK = dS^T Q / sqrt(h).  With exact O this is the exact gradient.  With a
    truncated O, D carries a biased error that enters dS (hence dQ, dK) only; dV is untouched.
    """

    @staticmethod
    def forward(ctx, q, k, v, fault: LowPrecFault | None):
        scale = 1.0 / math.sqrt(q.shape[-1])
        t = q.shape[-2]
        s = (q @ k.transpose(-1, -2)) * scale
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        o = p @ v
        ctx.save_for_backward(q, k, v, p, o)
        ctx.fault = fault
        ctx.scale = scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, p, o = ctx.saved_tensors
        fault: LowPrecFault | None = ctx.fault
        dv = p.transpose(-1, -2) @ do
        dp = do @ v.transpose(-1, -2)
        if fault is not None and fault.active:
            o_low = truncate_mantissa(o.float(), fault.mantissa_bits).to(o.dtype)
            o = o + fault.amplification * (o_low - o)
        d = (do * o).sum(-1, keepdim=True)
        ds = p * (dp - d)
        dq = (ds @ k) * ctx.scale
        dk = (ds.transpose(-1, -2) @ q) * ctx.scale
        return dq, dk, dv, None


# ---------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rope_tables(cfg: TinyConfig) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim))
    ang = torch.arange(cfg.max_seq).float()[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)  # HF "rotate_half" convention
    return ang.cos(), ang.sin()


def apply_rope(x, cos, sin):
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
    return x * cos + rot * sin


class Attention(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.cfg = cfg
        d, h = cfg.d_model, cfg.head_dim
        self.q_proj = nn.Linear(d, cfg.n_heads * h, bias=False)
        self.k_proj = nn.Linear(d, cfg.n_kv_heads * h, bias=False)
        self.v_proj = nn.Linear(d, cfg.n_kv_heads * h, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * h, d, bias=False)
        self.fault: LowPrecFault | None = None

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        c = self.cfg
        q = self.q_proj(x).view(b, t, c.n_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, c.n_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, c.n_kv_heads, c.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos[:t], sin[:t]), apply_rope(k, cos[:t], sin[:t])
        rep = c.n_heads // c.n_kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        o = LowPrecAttention.apply(q, k, v, self.fault)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, c.n_heads * c.head_dim))


class SwiGLU(nn.Module):
    def __init__(self, d: int, ffn: int):
        super().__init__()
        self.gate_proj = nn.Linear(d, ffn, bias=False)
        self.up_proj = nn.Linear(d, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoE(nn.Module):
    """Top-k MoE: linear router, softmax over all experts, then top-k, weights renormalised (Mixtral).

    ``aux_loss`` is the Switch/Mixtral load-balancing loss E * sum_e f_e * P_e, where f_e is the
    fraction of top-k slots routed to e and P_e the mean router probability of e.
    """

    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.n_experts, self.top_k = cfg.n_experts, cfg.top_k
        self.router = nn.Linear(cfg.d_model, cfg.n_experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(cfg.d_model, cfg.ffn) for _ in range(cfg.n_experts))
        self.aux_loss = torch.zeros(())

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        logits = self.router(x)
        probs = torch.softmax(logits, dim=-1)
        w, idx = probs.topk(self.top_k, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel():
                out.index_add_(0, tok, expert(x[tok]) * w[tok, slot, None])
        frac = F.one_hot(idx, self.n_experts).float().sum(1).mean(0) / self.top_k
        self.aux_loss = self.n_experts * (frac * probs.mean(0)).sum()
        return out.view(shape)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = MoE(cfg) if cfg.moe else SwiGLU(cfg.d_model, cfg.ffn)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.d_model)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)

    def decoder_layers(self) -> list[DecoderLayer]:
        """``layers``, typed (iterating an nn.ModuleList gives plain Modules)."""
        return [cast(DecoderLayer, layer) for layer in self.layers]


class TinyLM(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        cos, sin = rope_tables(cfg)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def set_fault(self, fault: LowPrecFault | None) -> None:
        for layer in self.model.decoder_layers():
            layer.self_attn.fault = fault

    def forward(self, ids):
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, self.rope_cos, self.rope_sin)
        return self.lm_head(self.model.norm(x))

    def aux_loss(self) -> torch.Tensor:
        if not self.cfg.moe:
            return torch.zeros(())
        # with cfg.moe every layer's mlp is a MoE; a sum of (at least one) tensors is a tensor
        total = sum(cast(MoE, layer.mlp).aux_loss for layer in self.model.decoder_layers())
        return cast(torch.Tensor, total / self.cfg.n_layers)
