"""Numerical health of the tensors read: a NaN or Inf is a finding, never a crash."""

from __future__ import annotations

import torch


def nonfinite_count(*tensors: torch.Tensor | None) -> int:
    """Number of NaN/Inf values over the given tensors (None entries are ignored)."""
    return int(sum((~torch.isfinite(t)).sum().item() for t in tensors if t is not None and t.is_floating_point()))
