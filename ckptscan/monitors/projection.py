"""Projection step sizes, weight side: the update ratio of a layer's attention output projection.

The low-precision attention fault corrupts the softmax backward (``D = rowsum(dO * O)``), so it
reaches the query/key gradients only; the output projection's gradient is computed from the
attention output and the incoming gradient, untouched.  Its update ratio ||dW_o||_F / ||W_o||_F
is therefore a reading of the step size that the attention fault does not move directly, where the
q/k update ratios jump with every collapse: when it grows with (or before) a D2-entropy collapse,
the step size grew, not only the attention numerics (``ckptscan.judge.classify``).
"""

from __future__ import annotations

import torch

from ckptscan.monitors.registry import BlockStep, Detector, Family, Role, register_family, series


def update_ratio(w0: torch.Tensor, w1: torch.Tensor) -> torch.Tensor:
    """||w1 - w0||_F / ||w0||_F as a 0-d float64 tensor (NaN when ``w0`` is zero)."""
    w0 = w0.double()
    n0 = w0.norm()
    if n0 == 0:
        return torch.tensor(float("nan"), dtype=torch.float64)
    return (w1.double() - w0).norm() / n0


def _pair(step: BlockStep) -> dict[str, torch.Tensor]:
    assert step.before is not None  # ``pair`` runs only with the previous checkpoint's tensors
    return {"update_ratio": update_ratio(step.before[0], step.now[0])}


FAMILY = register_family(
    Family(
        name="projection",
        blocks=lambda layout: layout.projections,
        load=lambda block, read: block.load(read),
        prefix=lambda block: block.name,
        single=lambda step: {},
        pair=_pair,
        series=series(
            "projection",
            "layer",
            "out",
            [("update_ratio", "pair", "up", "||dW_o||_F / ||W_o||_F (attention output projection)")],
        ),
        # scored by the same tests as the q/k update ratios (``attention.py``); the scores are
        # read by the classifier only (``detect._proj_broad``): no alarm of their own (the
        # step-size jump and rise rules, ``detect.jump_alarms`` and ``rise_alarms``, read the series itself)
        detectors=(
            Detector("out.update_ratio", "rate", True, False, 0.05, Role.PROJ_STEP, "trend"),
            Detector("out.update_ratio", "shift", True, False, 0.3, Role.PROJ_STEP),
        ),
    )
)
