"""MoE router monitors, weight side.  ``w`` is the router weight [E, d] (rows w_e, one per expert).

Spectra come from the E x E Gram matrix (E << d), never from an SVD of the E x d matrix itself.
"""

from __future__ import annotations

import torch

from ckptscan.monitors.linalg import gram_sq_singular_values, spectral_entropy, stable_rank
from ckptscan.monitors.registry import BlockStep, Detector, Family, Role, register_family, series


def single_monitors(w: torch.Tensor) -> dict[str, torch.Tensor]:
    """Monitors of one router weight, each a 0-d float64 tensor."""
    w = w.double()
    e = w.shape[0]
    norms = w.norm(dim=1)
    unit = w / norms.clamp_min(torch.finfo(w.dtype).tiny).unsqueeze(1)
    cos = unit @ unit.T
    iu = torch.triu_indices(e, e, offset=1, device=w.device)
    similarity = cos[iu[0], iu[1]].mean() if e > 1 else torch.tensor(float("nan"), dtype=w.dtype)

    w_bar = w.mean(0)
    centered = w - w_bar
    bar_norm = w_bar.norm()
    max_ratio = centered.norm(dim=1).max() / bar_norm if bar_norm > 0 else torch.tensor(float("inf"))
    # the centred matrix has rank <= E-1: condition number over those E-1 directions
    cs2 = gram_sq_singular_values(centered)[: max(e - 1, 1)]
    cond = (cs2[0] / cs2[-1]).sqrt() if cs2[-1] > 0 else torch.tensor(float("inf"), dtype=w.dtype)

    s2 = gram_sq_singular_values(w)
    return {
        "similarity": similarity,
        "centered_max_ratio": max_ratio.to(w.dtype),
        "centered_cond": cond.to(w.dtype),
        "W.entropy1": spectral_entropy(s2, 1.0),
        "W.entropy2": spectral_entropy(s2, 2.0),
        "W.stable_rank": stable_rank(s2),
    }


def pair_monitors(w0: torch.Tensor, w1: torch.Tensor) -> dict[str, torch.Tensor]:
    """Monitors of the router's increment from t-1 (``w0``) to t (``w1``)."""
    dw = (w1 - w0).double()
    s2 = gram_sq_singular_values(dw)
    w0n = w0.double().norm()
    return {
        "dW.entropy2": spectral_entropy(s2, 2.0),
        "dW.stable_rank": stable_rank(s2),
        "update_ratio": dw.norm() / w0n if w0n > 0 else torch.tensor(float("nan"), dtype=torch.float64),
    }


# --- the family: registered series and their detectors ------------------------------------------


def _before(step: BlockStep) -> torch.Tensor:
    assert step.before is not None  # ``pair`` runs only with the previous checkpoint's tensors
    return step.before[0]


FAMILY = register_family(
    Family(
        name="router",
        blocks=lambda layout: layout.routers,
        load=lambda block, read: block.load(read),
        single=lambda step: single_monitors(step.now[0]),
        pair=lambda step: pair_monitors(_before(step).double(), step.now[0].double()),
        series=series(
            "router",
            "layer",
            "router",
            [
                ("similarity", "single", "up", "mean pairwise cosine of router rows"),
                ("centered_max_ratio", "single", "up", "max_e ||w_e - w_bar|| / ||w_bar||"),
                (
                    "centered_cond",
                    "single",
                    "up",
                    "condition number of W_r - 1 w_bar^T (over its E-1 directions)",
                ),
                ("W.entropy1", "single", "both", "spectral entropy (alpha=1) of W_r, / log E"),
                ("W.entropy2", "single", "both", "spectral entropy (alpha=2) of W_r, / log E"),
                ("W.stable_rank", "single", "both", "stable rank of W_r"),
                ("dW.entropy2", "pair", "down", "spectral entropy (alpha=2) of dW_r, / log E"),
                ("dW.stable_rank", "pair", "down", "stable rank of dW_r"),
                ("update_ratio", "pair", "up", "||dW_r||_F / ||W_r||_F"),
            ],
        ),
        detectors=(
            Detector("router.update_ratio", "rate", True, False, 0.05, Role.STEP_SIZE, "trend", broad=True),
            Detector("router.update_ratio", "shift", True, False, 0.3, Role.STEP_SIZE, broad=True),
        ),
    )
)
