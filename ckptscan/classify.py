"""Fault signatures -> verdict: is the run anomalous, since when, what kind of fault, why.

The classes and the mechanisms behind them (monitors.md section 5, checked on the drills; see
docs/detection.md for what the data showed):

* ``lowprec_attention``: the biased rounding of low-precision attention makes the q/k update
  low-rank: the spectral entropy of D2 collapses in a few heads, *without* the step size growing
  (update ratios and ||D3||/||D2|| stay quiet at first).
* ``high_lr``: a too-large step moves every module at once: the update ratios of the whole layer
  stop shrinking and grow, and ||D3||/||D2|| (the second-order term) grows with them; the D2
  entropy does not collapse first (if anything it rises; it falls only late, as a consequence).
* ``combined``: both signatures start within the decision window.
* ``overflow``: NaN/Inf in weights with no earlier monitor alarm to explain it.
* ``unknown``: sustained alarms that match neither signature (e.g. only logit growth).
* ``healthy``: no sustained alarm and no overflow.

The decision looks at the alarms that start within ``DECISION_WINDOW`` checkpoints of the earliest
one: what moved *first* is the cause; later alarms are usually consequences.
"""

from __future__ import annotations

from ckptscan.detect import Alarm

DECISION_WINDOW = 2  # checkpoints after the earliest alarm whose alarms still count as "first"

LR_ROLES = ("step_size", "second_order")


def classify(alarms: list[Alarm], overflow: list[dict], n_layers: int, steps) -> dict:
    """The ``verdict`` object of summary.json from sustained alarms and overflow findings."""
    first_over = min(overflow, key=lambda f: f["step"]) if overflow else None
    if not alarms and first_over is None:
        return {"anomalous": False, "earliest_step": None, "fault_type": "healthy", "confidence": 0.9,
                "evidence": [], "reason": "no sustained alarm on any monitor, no NaN/Inf in weights"}

    evidence = [a.as_dict() for a in alarms[:20]]
    if not alarms or (first_over is not None and first_over["step"] < alarms[0].first_step):
        return {"anomalous": True, "earliest_step": int(first_over["step"]), "fault_type": "overflow",
                "confidence": 1.0, "evidence": evidence, "overflow": _overflow(first_over),
                "reason": "NaN/Inf in weights before (or without) any monitor alarm"}

    first = alarms[0]
    window = [a for a in alarms if a.index <= first.index + DECISION_WINDOW]
    structure = [a for a in window if a.role == "structure"]
    lr = [a for a in window if a.role in LR_ROLES]
    lr_layers = {a.layer for a in lr}
    step_size = [a for a in lr if a.role == "step_size"]
    second = [a for a in lr if a.role == "second_order"]
    n_layers = max(1, n_layers)

    if structure and lr:
        fault = "combined"
        conf = 0.5 + 0.25 * min(1.0, len({(a.layer, a.head) for a in structure}) / 2) \
            + 0.25 * min(1.0, len(lr_layers) / n_layers)
        reason = (f"D2 spectral entropy collapsed in {len({(a.layer, a.head) for a in structure})} head(s) and the step size grew in {len(lr_layers)} of {n_layers} layer(s) "
                  f"within {DECISION_WINDOW + 1} checkpoints")
    elif structure:
        fault = "lowprec_attention"
        heads = {(a.layer, a.head) for a in structure}
        conf = 0.6 + 0.3 * min(1.0, len(heads) / 2)
        reason = (f"D2 spectral entropy collapsed first, in {len(heads)} head(s) of layer(s) "
                  f"{sorted({a.layer for a in structure})}, while update ratios and ||D3||/||D2|| stayed quiet")
    elif lr:
        fault = "high_lr"
        conf = 0.4 + 0.3 * min(1.0, len(lr_layers) / n_layers) + 0.15 * bool(step_size) + 0.15 * bool(second)
        reason = (f"step size grew in {len(lr_layers)} of {n_layers} layer(s) "
                  f"({', '.join(sorted({a.block for a in lr}))}) with no D2 entropy collapse first")
    else:
        fault = "unknown"
        conf = 0.3
        reason = f"sustained alarms ({', '.join(sorted({a.block for a in window}))}) match no known signature"
    out = {"anomalous": True, "earliest_step": int(first.first_step), "fault_type": fault,
           "confidence": round(min(1.0, conf), 3), "evidence": evidence, "reason": reason,
           "decided_by": [a.as_dict() for a in window]}
    if first_over is not None:
        out["overflow"] = _overflow(first_over)
    return out


def _overflow(f: dict) -> dict:
    return {"step": int(f["step"]), "layer": f.get("layer"), "tensors": list(f.get("tensors", [])),
            "nonfinite": f.get("nonfinite")}
