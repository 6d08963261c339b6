"""The activation side of one checkpoint: replay file in, ``act.*`` monitor values out.

Called by the pipeline after the weight side, with the weights it already holds.  A replay file
that breaks the contract is reported (``ReplayError``) and only the activation side of that
checkpoint is lost; the weight side goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from ckptscan.errors import CkptscanError, ReplayError
from ckptscan.layouts.base import Layout
from ckptscan.monitors.activations import (
    RopeSpec,
    attention_activation_monitors,
    router_activation_monitors,
    routing_churn,
)
from ckptscan.replay.contract import ReplayFile

_TOPK = "topk."  # a part file's extras: "topk.<layer>" holds one router layer's top-k decisions


def topk_key(layer: int) -> str:
    """The extras key under which a checkpoint's part file keeps router layer ``layer``'s top-k."""
    return f"{_TOPK}{layer}"


def topk_by_layer(extras: dict) -> dict[int, np.ndarray]:
    """Layer -> top-k decisions [tokens, k], from a part file's extras (``topk_key``)."""
    return {int(k[len(_TOPK) :]): v for k, v in extras.items() if k.startswith(_TOPK)}


class Weights(Protocol):
    """One checkpoint's tensors, read on demand (the pipeline's ``_Weights``); asked only for blocks
    of its layout: (wq, wk) of an attention block, (w, bias) of a router."""

    def attn(self, layer: int, name: str = "attn") -> tuple[torch.Tensor, torch.Tensor]: ...

    def router(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None]: ...


# put(monitor name, layer, per-head vector, width): stores one layer's values of one series
Put = Callable[[str, int, torch.Tensor, int], None]


@dataclass
class ReplayState:
    """What the next checkpoint's activation increments need: this checkpoint's replay file path
    (re-opened, not held in memory) and its routing decisions per layer."""

    path: Path
    topk: dict[int, torch.Tensor] = field(default_factory=dict)


def attention_is_exact(layout: Layout, block_name: str) -> bool:
    """Activation-side attention is recomputed only where q/k are linear in the replay input:
    per-token QK-norm (Qwen3, OLMoE) and MLA's normalised low-rank path are not."""
    return block_name == "attn" and not layout.config.qk_norm and not layout.family.startswith("deepseek")


def activation_values(
    replay_path: Path,
    layout: Layout,
    weights: Weights,
    prev: ReplayState | None,
    prev_weights: Weights | None,
    reference_ids: np.ndarray | None,
    put: Put,
    device: torch.device,
    attention: bool = True,
) -> tuple[ReplayState, np.ndarray | None, dict[str, np.ndarray]]:
    """Compute every ``act.*`` series of one checkpoint via ``put(name, layer, vector, width)``.

    ``weights`` / ``prev_weights``: this and the previous checkpoint's tensors, read on demand
    (``.attn(layer, block) -> (wq, wk)``, ``.router(layer) -> (w, bias)``; ``prev_weights`` may be None).
    Returns the state for the next checkpoint, this file's input_ids, and the per-layer top-k
    routing decisions (kept in the part file for churn against the final checkpoint).
    Raises ReplayError (naming file and dataset) when the file breaks the contract.
    ``attention=False``: the router side only (the routing state a later checkpoint compares to).
    """
    rope = RopeSpec.of(layout.config) if layout.config.uses_rope else None
    hidden = max((b.hidden for b in layout.attention), default=None)
    extras: dict[str, np.ndarray] = {}
    with ReplayFile(replay_path) as rf:
        rf.check(
            hidden,
            layout.n_layers,
            router_layers=[r.layer for r in layout.routers],
            n_experts=max((r.n_experts for r in layout.routers), default=None),
        )
        ids = rf.input_ids()
        if reference_ids is not None and ids is not None:
            rf.check_tokens(reference_ids)
        prev_rf = _open_prev(prev)
        try:
            width = max((b.n_heads for b in layout.attention if b.name == "attn"), default=1)
            for b in layout.attention if attention else ():
                if not attention_is_exact(layout, b.name) or b.layer not in rf.layers():
                    continue
                wq, wk = weights.attn(b.layer, b.name)
                if not (torch.isfinite(wq.sum()) and torch.isfinite(wk.sum())):
                    continue  # an overflow finding already
                x = rf.attn_in(b.layer, b.hidden).to(device)
                kw = {}
                if prev_rf is not None and prev_weights is not None and b.layer in prev_rf.layers():
                    before = _try(prev_weights.attn, b.layer, b.name)
                    if before is not None and before[0].shape == wq.shape and before[1].shape == wk.shape:
                        kw = {
                            "x_prev": prev_rf.attn_in(b.layer, b.hidden).to(device),
                            "wq_prev": before[0],
                            "wk_prev": before[1],
                        }
                vals = attention_activation_monitors(
                    x, wq, wk, b.kv_index(), rope=rope if b.rope else None, **kw
                )
                for name, v in vals.items():
                    put(name, b.layer, v, width)
            topk_now: dict[int, torch.Tensor] = {}
            for r in layout.routers:
                w, bias = weights.router(r.layer)
                if not torch.isfinite(w.sum()):
                    continue  # an overflow finding already
                logits = rf.router_logits(r.layer, r.n_experts) if rf.has(r.layer, "router_logits") else None
                w_in: torch.Tensor | None
                if logits is None:
                    if not rf.has(r.layer, "router_in"):
                        continue
                    inp, w_in = rf.router_in(r.layer, r.hidden).to(device), w  # logits recomputed from x
                else:
                    inp, w_in = logits.to(device), None
                prev_topk = prev.topk.get(r.layer) if prev is not None else None
                vals, idx = router_activation_monitors(
                    inp,
                    w_in,
                    bias,
                    routing=r.routing,
                    top_k=r.top_k or layout.config.top_k or 2,
                    prev_topk=prev_topk,
                )
                for name, v in vals.items():
                    put(name, r.layer, v, 1)
                topk_now[r.layer] = idx.cpu()
                extras[topk_key(r.layer)] = idx.cpu().numpy().astype(np.int16)
        finally:
            if prev_rf is not None:
                prev_rf.close()
    return ReplayState(Path(replay_path), topk_now), ids, extras


def add_churn_final(results) -> None:
    """``act.router.churn_final``: each checkpoint's routing vs the final checkpoint's, per layer
    (OLMoE's router saturation), from the top-k decisions stored with every checkpoint."""
    final = next((r for r in reversed(results) if topk_by_layer(r.extras)), None)
    if final is None:
        return
    last = topk_by_layer(final.extras)
    for r in results:
        for layer, idx in topk_by_layer(r.extras).items():
            if layer not in last or idx.shape != last[layer].shape:
                continue
            arr = r.values.setdefault(
                "act.router.churn_final",
                np.full((final.values["numerics.nonfinite"].shape[0], 1), np.nan, np.float32),
            )
            arr[layer, 0] = routing_churn(
                torch.from_numpy(idx.astype(np.int64)), torch.from_numpy(last[layer].astype(np.int64))
            )


def _try(load, *args):
    try:
        return load(*args)
    except (CkptscanError, KeyError):
        return None


def _open_prev(prev: ReplayState | None) -> ReplayFile | None:
    if prev is None:
        return None
    try:
        return ReplayFile(prev.path)
    except ReplayError:
        return None
