"""What a resolved layout is: per layer, how to get the query/key weights per head and the router.

Tensor names live in ``ckptscan/layouts/`` only.  Everything downstream sees ``AttnBlock`` and
``RouterBlock`` objects whose ``load`` returns plain tensors in a fixed convention:

* ``AttnBlock.load(read) -> (wq, wk)``: ``wq`` float32 ``[H, h, d]``, ``wk`` float32 ``[G, h, d]``,
  where query head ``j`` reads key head ``j // (H // G)``.  QK-norm gains are folded into the rows.
* ``ProjBlock.load(read) -> (w,)``: one projection matrix, float32, as stored (its update ratio
  is all that is read from it, and that does not depend on its orientation).
* ``RouterBlock.load(read) -> (w, bias)``: ``w`` float32 ``[E, d]``, ``bias`` float32 ``[E]`` or None
  (GPT-OSS router bias, DeepSeek-V3 ``e_score_correction_bias``, Megatron ``expert_bias``).

``read`` is ``TensorSource.read``: a callable name -> tensor (stored dtype, CPU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

Read = Callable[[str], torch.Tensor]


@dataclass(frozen=True)
class ModelConfig:
    """The architecture facts ckptscan needs, from config.json and/or tensor shapes."""

    model_type: str | None = None
    hidden_size: int | None = None
    n_layers: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    head_dim: int | None = None
    rope_theta: float | None = None
    rope_scaling: dict | None = None  # rope_parameters / rope_scaling as given
    partial_rotary_factor: float = 1.0
    uses_rope: bool = True
    qk_norm: bool = False
    n_experts: int | None = None
    top_k: int | None = None
    raw: dict = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class AttnBlock:
    layer: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden: int
    tensors: tuple[str, ...]  # names read by ``load`` (shown by ``inspect``)
    load: Callable[[Read], tuple[torch.Tensor, torch.Tensor]] = field(repr=False, compare=False)
    name: str = "attn"  # "attn"; MLA adds "attn_rope" for the shared RoPE part
    rope: bool = True  # whether RoPE applies to this block's q/k (activation side)

    @property
    def group(self) -> int:
        return self.n_heads // self.n_kv_heads

    def kv_index(self) -> torch.Tensor:
        return torch.arange(self.n_heads) // self.group


# the routing rules a router may follow (``RouterBlock.routing``; the maths: ``monitors.activations``)
ROUTINGS = ("softmax_topk", "topk_softmax", "sigmoid_bias")


@dataclass(frozen=True)
class RouterBlock:
    layer: int
    n_experts: int
    hidden: int
    tensors: tuple[str, ...]
    load: Callable[[Read], tuple[torch.Tensor, torch.Tensor | None]] = field(repr=False, compare=False)
    # routing rule: "softmax_topk" (Mixtral, Qwen-MoE, OLMoE), "topk_softmax" (GPT-OSS),
    # "sigmoid_bias" (DeepSeek-V3: sigmoid scores + correction bias for selection)
    routing: str = "softmax_topk"
    top_k: int | None = None


@dataclass(frozen=True)
class ProjBlock:
    """A layer's projection read for its step size only: ``name`` "out" is the attention output
    projection (o_proj, dense, c_proj, linear_proj, wo, w_out)."""

    layer: int
    tensors: tuple[str, ...]
    load: Callable[[Read], tuple[torch.Tensor]] = field(repr=False, compare=False)
    name: str = "out"


@dataclass
class Layout:
    family: str
    config: ModelConfig
    attention: list[AttnBlock]
    routers: list[RouterBlock]
    notes: list[str] = field(default_factory=list)
    projections: list[ProjBlock] = field(default_factory=list)

    @property
    def n_layers(self) -> int:
        layers = {b.layer for b in self.attention} | {r.layer for r in self.routers}
        return max(layers) + 1 if layers else 0

    def describe(self) -> dict[str, Any]:
        """JSON-able summary for ``inspect`` and the report's inputs section."""
        return {
            "family": self.family,
            "config": {k: v for k, v in self.config.__dict__.items() if k != "raw"},
            "attention": [
                {
                    "layer": b.layer,
                    "block": b.name,
                    "heads": b.n_heads,
                    "kv_heads": b.n_kv_heads,
                    "head_dim": b.head_dim,
                    "hidden": b.hidden,
                    "tensors": list(b.tensors),
                }
                for b in self.attention
            ],
            "routers": [
                {
                    "layer": r.layer,
                    "experts": r.n_experts,
                    "hidden": r.hidden,
                    "routing": r.routing,
                    "tensors": list(r.tensors),
                }
                for r in self.routers
            ],
            "projections": [
                {"layer": p.layer, "block": p.name, "tensors": list(p.tensors)} for p in self.projections
            ],
            "notes": list(self.notes),
        }
