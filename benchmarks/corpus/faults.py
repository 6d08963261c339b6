"""The injected faults, as they plug into a transformers model and a torch LR scheduler.

* ``lowprec_attention``: an attention function registered with transformers' ``AttentionInterface``
  under ``ATTN_IMPL``.  Every corpus model runs it (healthy twins too, so both run the same kernel):
  causal softmax attention through ``ckptscan.drills.model.LowPrecAttention``, whose backward forms
  ``D = rowsum(dO * O_eff)`` with ``O_eff = O + a(t) (trunc_7bits(O) - O)`` -- the drills' emulation
  of the bf16 flash-attention failure.  ``FAULT`` (one per process) is switched by the training loop:
  ``a(t) = severity * (t - onset + 1) / 1000`` for steps t >= onset.
* ``lr_multiplier``: a factor on top of the planned schedule from the onset on, in one of the shapes
  ``LR_SHAPES`` (a scheduler bug or a bad config change).
"""

from __future__ import annotations

import math

from transformers import AttentionInterface

from ckptscan.drills.model import LowPrecAttention, LowPrecFault

ATTN_IMPL = "ckptscan_lowprec"
FAULT = LowPrecFault(mantissa_bits=7, amplification=0.0, active=False)

LR_SHAPES = ("growth", "jump", "jump-growth", "ramp")


def lowprec_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention function: q [B, H, T, d], k/v [B, G, T, d] -> (out [B, T, H, d], None).

    Causal, no padding (the corpus batches are full windows), no dropout; GQA by repeating KV heads.
    """
    head_dim = query.shape[-1]
    if scaling is not None and not math.isclose(scaling, head_dim**-0.5, rel_tol=1e-6):
        raise ValueError(f"{ATTN_IMPL}: only the 1/sqrt(head_dim) scaling is supported, got {scaling}")
    if dropout and module.training:
        raise ValueError(f"{ATTN_IMPL}: attention dropout is not supported")
    window = kwargs.get("sliding_window")
    if window is not None and window < query.shape[-2]:
        raise ValueError(
            f"{ATTN_IMPL}: a sliding window ({window}) shorter than the sequence is not supported"
        )
    if kwargs.get("softcap") is not None:
        raise ValueError(f"{ATTN_IMPL}: a logit soft-cap is not supported")
    rep = query.shape[1] // key.shape[1]
    if rep > 1:
        key, value = key.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)
    out = LowPrecAttention.apply(query, key, value, FAULT)
    return out.transpose(1, 2).contiguous(), None


def register() -> None:
    """Make ``attn_implementation=ATTN_IMPL`` available to transformers models (idempotent)."""
    AttentionInterface.register(ATTN_IMPL, lowprec_attention)


def set_lowprec(step: int, onset: int | None, severity: float | None) -> None:
    """Switch ``FAULT`` for the optimizer update of ``step`` (1-based)."""
    on = severity is not None and onset is not None and step >= onset
    FAULT.active = on
    FAULT.amplification = severity * (step - onset + 1) / 1000.0 if on else 0.0


def lr_multiplier(step: int, onset: int | None, lr_fault: dict | None) -> float:
    """The fault's factor on the planned LR at ``step`` (1-based); 1 before the onset.

    Shapes (``lr_fault["shape"]``):
      growth       exp(growth * (t - onset) / 1000)             (the drills' high-lr fault)
      jump         factor                                        (a constant step up)
      jump-growth  factor * exp(growth * (t - onset) / 1000)     (a step up, then a slow rise)
      ramp         1 + (factor - 1) * min(1, (t - onset + 1) / ramp_steps)  (rises, then held)
    """
    if lr_fault is None or onset is None or step < onset:
        return 1.0
    shape, dt = lr_fault["shape"], step - onset
    if shape == "growth":
        return math.exp(lr_fault["growth"] * dt / 1000.0)
    if shape == "jump":
        return lr_fault["factor"]
    if shape == "jump-growth":
        return lr_fault["factor"] * math.exp(lr_fault["growth"] * dt / 1000.0)
    if shape == "ramp":
        return 1.0 + (lr_fault["factor"] - 1.0) * min(1.0, (dt + 1) / lr_fault["ramp_steps"])
    raise ValueError(f"unknown LR fault shape {shape!r}; choose one of {', '.join(LR_SHAPES)}")
