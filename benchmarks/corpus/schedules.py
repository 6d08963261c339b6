"""Planned learning-rate schedules, and the benign LR events that must not count as faults.

``planned_lr(step, ...)`` is the LR a recipe asks for at optimizer step ``step`` (1-based): a linear
warm-up from 0, then

  cos     cosine from the peak to ``MIN_RATIO["cos"]`` of it at the last step
  lin     linear to 0 at the last step (transformers' ``get_linear_schedule_with_warmup``)
  wsd     warmup-stable-decay: the peak until the last ``WSD_DECAY`` of the run, then linear to 0
  const   the peak

Benign events (``benign``, from ``onset`` on):
  warmup-cut   the warm-up was planned for ``warmup`` steps but is cut at ``onset`` (>= warmup / 2):
               the LR jumps from onset/warmup of its peak to the peak (at most x2), then decays
  rewarm       a restart: a new warm-up of ``REWARM_FRACTION`` of the remaining steps up to
               ``REWARM_PEAK`` of the peak, then the same schedule family over the remaining steps
  data-switch  no LR change (the batches come from another source; see ``common.BatchStream``)
"""

from __future__ import annotations

import math

SCHEDULES = ("cos", "lin", "wsd", "const")
MIN_RATIO = {"cos": 0.1, "lin": 0.0, "wsd": 0.0, "const": 1.0}
WSD_DECAY = 0.2  # fraction of the run over which warmup-stable-decay decays
REWARM_FRACTION = 0.05
REWARM_PEAK = 0.5


def _decay(step: int, *, schedule: str, start: int, total: int) -> float:
    """The post-warm-up factor (1 at ``start``) at ``step``."""
    if schedule == "const":
        return 1.0
    if schedule == "wsd":
        decay_from = total - round(WSD_DECAY * total)
        if step <= decay_from:
            return 1.0
        return max(0.0, 1.0 - (step - decay_from) / max(1, total - decay_from))
    prog = min(1.0, max(0.0, (step - start) / max(1, total - start)))
    lo = MIN_RATIO[schedule]
    if schedule == "cos":
        return lo + (1 - lo) * 0.5 * (1 + math.cos(math.pi * prog))
    if schedule == "lin":
        return 1.0 - prog
    raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")


def planned_lr(
    step: int,
    *,
    peak: float,
    schedule: str,
    warmup: int,
    total: int,
    onset: int | None = None,
    benign: str | None = None,
) -> float:
    """The recipe's LR at optimizer step ``step`` (1-based), benign event included."""
    if benign == "warmup-cut":
        if step < onset:
            return peak * step / warmup
        return peak * _decay(step, schedule=schedule, start=onset, total=total)
    if benign == "rewarm" and step >= onset:
        rest = total - onset + 1
        return REWARM_PEAK * planned_lr(
            step - onset + 1,
            peak=peak,
            schedule=schedule,
            warmup=max(1, round(REWARM_FRACTION * rest)),
            total=rest,
        )
    if step <= warmup:
        return peak * step / warmup
    return peak * _decay(step, schedule=schedule, start=warmup, total=total)
