"""Numerical health of the tensors read: a NaN or Inf is a finding, never a crash."""

from __future__ import annotations

import torch


def nonfinite_count(*tensors: torch.Tensor | None) -> int:
    """Number of NaN/Inf values over the given tensors (None entries are ignored).

    Fast path: a tensor whose sum is finite has no NaN/Inf, and one reduction is much cheaper than
    materialising isfinite(); only a non-finite sum (a NaN/Inf, or finite values so large that the
    sum overflows) pays for the exact count.
    """
    count = 0
    for t in tensors:
        if t is None or not t.is_floating_point():
            continue
        if not torch.isfinite(t.sum()):
            count += int((~torch.isfinite(t)).sum().item())
    return count
