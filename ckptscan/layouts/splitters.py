"""Loaders: turn the stored (possibly fused, normed, quantised) tensors into per-head float32 weights.

Each loader is a small frozen dataclass whose ``__call__(read)`` is the ``load`` of an ``AttnBlock``
or ``RouterBlock``.  All dimensions are fixed when the layout is resolved (from headers), so a loader
only reads the tensors it lists in ``names()`` and does plain reshapes; it never looks at other tensors.

Conversion goes straight to float32 (bf16/fp16/fp8 -> f32 is exact); never through fp16.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import Read


@dataclass(frozen=True)
class Src:
    """One stored tensor; ``scale`` names a block-wise FP8 inverse scale (DeepSeek-V3 ``weight_scale_inv``);
    ``index`` picks one layer of a tensor stacked over layers (Megatron torch_dist checkpoints)."""

    name: str
    scale: str | None = None
    block: tuple[int, int] = (128, 128)
    index: int | None = None

    def names(self) -> tuple[str, ...]:
        return (self.name,) if self.scale is None else (self.name, self.scale)

    def load(self, read: Read) -> torch.Tensor:
        t = read(self.name)
        if self.index is not None:
            t = t[self.index]
        t = t.to(torch.float32)
        if self.scale is None:
            return t
        s = read(self.scale).to(torch.float32)
        b0, b1 = self.block
        s = s.repeat_interleave(b0, dim=0)[: t.shape[0]].repeat_interleave(b1, dim=1)[:, : t.shape[1]]
        return t * s


def _names(*srcs: Src | None) -> tuple[str, ...]:
    return tuple(n for s in srcs if s is not None for n in s.names())


def fold_gain(w: torch.Tensor, gain: torch.Tensor | None, offset: float) -> torch.Tensor:
    """Scale the rows of ``w`` [n, h, d] by a QK-norm gain of size ``h`` (per head) or ``n*h`` (whole
    projection).  ``offset`` is 1 for Gemma-style norms that multiply by ``1 + weight``."""
    if gain is None:
        return w
    g = gain.reshape(-1) + offset
    n, h, _ = w.shape
    if g.numel() == h:
        return w * g.view(1, h, 1)
    return w * g.view(n, h, 1)


@dataclass(frozen=True)
class SeparateQK:
    """q [H*h, d] and k [G*h, d] stored apart (LLaMA family, GPT-OSS, torchtitan, OLMo-core)."""

    q: Src
    k: Src
    n_heads: int
    n_kv_heads: int
    head_dim: int
    q_norm: Src | None = None
    k_norm: Src | None = None
    norm_offset: float = 0.0

    def names(self) -> tuple[str, ...]:
        return _names(self.q, self.k, self.q_norm, self.k_norm)

    def __call__(self, read: Read) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.head_dim
        wq = self.q.load(read).reshape(self.n_heads, h, -1)
        wk = self.k.load(read).reshape(self.n_kv_heads, h, -1)
        qg = self.q_norm.load(read) if self.q_norm else None
        kg = self.k_norm.load(read) if self.k_norm else None
        return fold_gain(wq, qg, self.norm_offset), fold_gain(wk, kg, self.norm_offset)


def split_fused(
    w: torch.Tensor, order: str, n_heads: int, n_kv_heads: int, head_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a fused qkv weight [rows, d] into wq [H, h, d], wk [G, h, d].

    * ``contiguous``: all q rows, then all k rows, then v (Phi-3, GPT-2 after transposing, Falcon-7B
      multi-query with G=1).
    * ``per_head``: per head ``[q_j; k_j; v_j]`` (GPT-NeoX/Pythia, BLOOM, old Falcon), needs G == H.
    * ``per_group``: per kv group ``[q_(g,0..H/G-1); k_g; v_g]`` (Megatron-Core ``linear_qkv``, Falcon
      new_decoder_architecture).
    """
    H, G, h = n_heads, n_kv_heads, head_dim
    d = w.shape[-1]
    if order == "contiguous":
        wq = w[: H * h].reshape(H, h, d)
        wk = w[H * h : (H + G) * h].reshape(G, h, d)
    elif order == "per_head":
        v = w.reshape(H, 3, h, d)
        wq, wk = v[:, 0], v[:, 1]
    elif order == "per_group":
        v = w.reshape(G, H // G + 2, h, d)
        wq = v[:, : H // G].reshape(H, h, d)
        wk = v[:, H // G]
    else:  # pragma: no cover - validated when the layout is resolved
        raise ValueError(order)
    return wq.contiguous(), wk.contiguous()


@dataclass(frozen=True)
class FusedQKV:
    """One fused qkv weight; ``transposed`` for GPT-2's Conv1D, stored [d, rows]."""

    qkv: Src
    order: str
    n_heads: int
    n_kv_heads: int
    head_dim: int
    transposed: bool = False
    q_norm: Src | None = None
    k_norm: Src | None = None
    norm_offset: float = 0.0

    def names(self) -> tuple[str, ...]:
        return _names(self.qkv, self.q_norm, self.k_norm)

    def __call__(self, read: Read) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.qkv.load(read)
        if self.transposed:
            w = w.t()
        wq, wk = split_fused(w, self.order, self.n_heads, self.n_kv_heads, self.head_dim)
        qg = self.q_norm.load(read) if self.q_norm else None
        kg = self.k_norm.load(read) if self.k_norm else None
        return fold_gain(wq, qg, self.norm_offset), fold_gain(wk, kg, self.norm_offset)


@dataclass(frozen=True)
class MLA:
    """DeepSeek-V2/V3 multi-head latent attention, one of its two bilinear parts.

    ``part="nope"``: wq_j = q_b[j, :nope] diag(q_a_ln) q_a, wk_j = kv_b[j, :nope] diag(kv_a_ln) kv_a[:kv_lora]
    (H query and H key heads).  ``part="rope"``: wq_j = q_b[j, nope:] diag(q_a_ln) q_a and the one shared
    key kv_a[kv_lora:] (G = 1).  Without q LoRA, ``q`` is the full q projection [H*(nope+rope), d].
    The latent RMSNorms also divide by a per-token scalar; only their gains can be folded.
    """

    part: str  # "nope" | "rope"
    n_heads: int
    nope: int
    rope: int
    v_dim: int
    kv_lora: int
    kv_a: Src
    q: Src | None = None  # full q projection (q_lora_rank null)
    q_a: Src | None = None
    q_a_norm: Src | None = None
    q_b: Src | None = None
    kv_a_norm: Src | None = None
    kv_b: Src | None = None

    def names(self) -> tuple[str, ...]:
        q_side = (self.q,) if self.q is not None else (self.q_a, self.q_a_norm, self.q_b)
        k_side = (self.kv_a, self.kv_a_norm, self.kv_b) if self.part == "nope" else (self.kv_a,)
        return _names(*q_side, *k_side)

    def _q_heads(self, read: Read) -> torch.Tensor:
        """[H, nope+rope, d]: per-head query maps from the hidden state."""
        H = self.n_heads
        if self.q is not None:
            return self.q.load(read).reshape(H, self.nope + self.rope, -1)
        # Builder.mla sets q_a and q_b whenever it leaves q out
        assert self.q_a is not None and self.q_b is not None, "MLA without q needs q_a and q_b"
        q_a = self.q_a.load(read)
        if self.q_a_norm is not None:
            q_a = q_a * self.q_a_norm.load(read).reshape(-1, 1)
        q_b = self.q_b.load(read).reshape(H, self.nope + self.rope, -1)
        return torch.matmul(q_b, q_a)

    def __call__(self, read: Read) -> tuple[torch.Tensor, torch.Tensor]:
        qh = self._q_heads(read)
        kv_a = self.kv_a.load(read)
        if self.part == "rope":
            return qh[:, self.nope :].contiguous(), kv_a[self.kv_lora :].reshape(1, self.rope, -1)
        assert self.kv_b is not None, "MLA's nope part needs kv_b"  # Builder.mla sets it for that part
        lat = kv_a[: self.kv_lora]
        if self.kv_a_norm is not None:
            lat = lat * self.kv_a_norm.load(read).reshape(-1, 1)
        kv_b = self.kv_b.load(read).reshape(self.n_heads, self.nope + self.v_dim, -1)
        wk = torch.matmul(kv_b[:, : self.nope], lat)
        return qh[:, : self.nope].contiguous(), wk


@dataclass(frozen=True)
class Router:
    """Router weight [E, d] (OLMo-core stores it flattened as [E*d]) and optional bias [E]."""

    weight: Src
    n_experts: int
    hidden: int
    bias: Src | None = None

    def names(self) -> tuple[str, ...]:
        return _names(self.weight, self.bias)

    def __call__(self, read: Read) -> tuple[torch.Tensor, torch.Tensor | None]:
        w = self.weight.load(read).reshape(self.n_experts, self.hidden)
        b = self.bias.load(read).reshape(self.n_experts) if self.bias is not None else None
        return w, b


@dataclass(frozen=True)
class Whole:
    """One matrix as stored (a projection read for its update ratio: ``ProjBlock``)."""

    weight: Src

    def names(self) -> tuple[str, ...]:
        return self.weight.names()

    def __call__(self, read: Read) -> tuple[torch.Tensor]:
        return (self.weight.load(read),)
