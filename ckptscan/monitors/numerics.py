"""Numerical health of the tensors read: a NaN or Inf is a finding, never a crash."""

from __future__ import annotations

import torch

# Gram blocks square the weights: above ~2**50 a float32 row sum can overflow (bf16/fp32 weights
# reach 3.4e38), below ~2**-40 the squares are float32 subnormals and lose digits.  Blocks with
# such magnitudes are computed in float64 instead (rare, so the cost does not matter).
F32_GRAM_RANGE = (2.0**-40, 2.0**50)


def gram_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """float32 for ordinary weights, float64 when their largest |value| is outside F32_GRAM_RANGE
    (a block with NaN/Inf is reported, not computed, so its dtype does not matter)."""
    top = max((float(t.detach().abs().amax()) for t in tensors if t is not None and t.numel()), default=0.0)
    lo, hi = F32_GRAM_RANGE
    return torch.float32 if top == 0.0 or lo <= top <= hi else torch.float64


def nonfinite_count(*tensors: torch.Tensor | None) -> int:
    """Number of NaN/Inf values over the given tensors (None entries are ignored).

    Fast path: a tensor whose sum is finite has no NaN/Inf, and one reduction is ~20x cheaper than
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
