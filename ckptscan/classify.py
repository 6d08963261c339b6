"""Fault signatures -> verdict: is the run anomalous, since when, what kind of fault, why.

The classes and the mechanisms behind them (monitors.md section 5, checked on the drills; see
docs/detection.md for what the data showed):

* ``lowprec_attention``: the biased rounding of low-precision attention makes the q/k update
  low-rank: the spectral entropy of D2 collapses in a few heads, *without* the step size growing
  (update ratios and ||D3||/||D2|| stay quiet at first).
* ``high_lr``: a too-large step moves every module at once: the update ratios of the whole layer
  stop shrinking and grow, and ||D3||/||D2|| (the second-order term) grows with them; the D2
  entropy does not collapse first (if anything it rises; it falls only late, as a consequence).
* ``combined``: both signatures: the entropy collapse, and step-size growth (or logit growth) in a
  layer whose entropy had not collapsed, or in the router -- within the decision window, or, when
  the collapse came first, at any later checkpoint (the low-precision fault cannot cause growth
  there; ``_global_evidence``).
* ``overflow``: NaN/Inf in weights with no earlier monitor alarm to explain it.
* ``unknown``: sustained alarms that match neither signature (e.g. only logit growth).
* ``healthy``: no sustained alarm and no overflow, over at least ``Params.min_examined`` checkpoints
  examined after the run settled.
* ``inconclusive``: no alarm either, but too little of the run could be examined to call it healthy
  (it never left its early phase, or too few checkpoints came after that); ``anomalous`` is False.

The decision looks at the alarms that start within ``DECISION_WINDOW`` checkpoints of the earliest
one: what moved *first* is the cause; later alarms are usually consequences -- except growth that
the first cause cannot explain (see ``combined``).
"""

from __future__ import annotations

from ckptscan.detect import Alarm

DECISION_WINDOW = 2  # checkpoints after the earliest alarm whose alarms still count as "first"

LR_ROLES = ("step_size", "second_order")


def classify(alarms: list[Alarm], overflow: list[dict], n_layers: int, steps, coverage: dict | None = None) -> dict:
    """The ``verdict`` object of summary.json from sustained alarms and overflow findings.

    ``coverage`` (``examination``): how much of the run the detectors examined; a run without
    alarms is ``healthy`` only where that was enough, ``inconclusive`` otherwise."""
    first_over = min(overflow, key=lambda f: f["step"]) if overflow else None
    if not alarms and first_over is None:
        if coverage is not None and coverage["missing"]:
            return {"anomalous": False, "earliest_step": None, "confirmed_step": None, "fault_type": "inconclusive",
                    "confidence": 0.0, "evidence": [], "reason": f"not enough evidence: {coverage['missing']}"}
        return {"anomalous": False, "earliest_step": None, "confirmed_step": None, "fault_type": "healthy", "confidence": 0.9,
                "evidence": [], "reason": "no sustained alarm on any monitor, no NaN/Inf in weights"}

    # shown in the order the excursions began (the decision below follows the triggers)
    evidence = [a.as_dict() for a in sorted(alarms, key=lambda a: (a.first_step, a.index, -a.score))[:20]]
    # the run has been off since the earliest start of any alarm's excursion (an alarm's start
    # reaches back over the drift that led into its trigger); the first trigger decides the class
    earliest = min((a.first_step for a in alarms), default=None)
    if not alarms or (first_over is not None and first_over["step"] < earliest):
        return {"anomalous": True, "earliest_step": int(first_over["step"]),
                "confirmed_step": int(first_over["step"]), "fault_type": "overflow",
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

    spread: list[Alarm] = []
    if structure:
        # step-size alarms in a layer whose entropy had already collapsed are the collapse's own
        # consequence; elsewhere (or later, in another layer or the router) they are a second cause
        lr = [a for a in _global_evidence(alarms) if a.role in LR_ROLES and a.index <= first.index + DECISION_WINDOW]
        spread = [] if lr else _global_evidence(alarms)
    if structure and (lr or spread):
        lr = lr or spread
        lr_layers = {a.layer for a in lr}
        fault = "combined"
        conf = 0.5 + 0.25 * min(1.0, len({(a.layer, a.head) for a in structure}) / 2) \
            + 0.25 * min(1.0, len(lr_layers) / n_layers)
        if spread:
            reason = (f"D2 spectral entropy collapsed first, in {len({(a.layer, a.head) for a in structure})} head(s), and later "
                      f"{', '.join(sorted({a.block for a in spread}))} grew in layer(s) {sorted(lr_layers)} whose D2 entropy "
                      f"had not collapsed (a global cause, the step size, on top of the low-rank update)")
        else:
            reason = (f"D2 spectral entropy collapsed in {len({(a.layer, a.head) for a in structure})} head(s) and the step size grew "
                      f"in {len(lr_layers)} of {n_layers} layer(s) within {DECISION_WINDOW + 1} checkpoints")
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
    # when a monitor reading the checkpoints as they came could have raised it: the first alarm
    # to complete its persistence rule (not necessarily the one that started earliest)
    confirmed = min((a.confirmed_step for a in alarms if a.confirmed_step is not None), default=None)
    out = {"anomalous": True, "earliest_step": int(earliest),
           "confirmed_step": confirmed, "fault_type": fault,
           "confidence": round(min(1.0, conf), 3), "evidence": evidence, "reason": reason,
           "decided_by": [a.as_dict() for a in window]}
    if first_over is not None:
        out["overflow"] = _overflow(first_over)
    return out


def _global_evidence(alarms: list[Alarm]) -> list[Alarm]:
    """Alarms that the low-precision mechanism cannot explain, after a D2-entropy collapse came first.

    The biased rounding acts on the q/k gradients of the heads it hits: their update turns low-rank
    (D2 entropy collapses) and, as a consequence, *that layer's* logits (||M||) and update ratios
    grow.  A layer whose D2 entropy has not collapsed (yet) has no such cause, and the router is
    not touched at all.  So a step-size / second-order / logit-growth alarm in a layer with no
    earlier-or-simultaneous structure alarm says that something global (the step size) is wrong
    too: the second half of the ``combined`` signature, which at a weak LR growth shows up several
    checkpoints after the entropy collapse (drills: 1-3 checkpoints of 100 steps).  On the
    lowprec-only drills no such alarm occurs in the whole run (docs/detection.md)."""
    collapsed_at: dict[int, int] = {}
    for a in alarms:
        if a.role == "structure":
            collapsed_at[a.layer] = min(collapsed_at.get(a.layer, a.index), a.index)
    out = []
    for a in alarms:
        if a.role not in LR_ROLES + ("logits",):
            continue
        if a.block.startswith("router") or a.layer not in collapsed_at or a.index < collapsed_at[a.layer]:
            out.append(a)
    return out


def _overflow(f: dict) -> dict:
    return {"step": int(f["step"]), "layer": f.get("layer"), "tensors": list(f.get("tensors", [])),
            "nonfinite": f.get("nonfinite")}
