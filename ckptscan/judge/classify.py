"""Fault signatures -> verdict: is the run anomalous, since when, what kind of fault, why.

The classes and the mechanisms behind them (docs/detection.md, "Classification", has the decision
paths and what the corpus showed):

* ``lowprec_attention``: the biased rounding of low-precision attention makes the q/k update
  low-rank: the spectral entropy of D2 collapses in a few heads, *without* the step size growing
  across layers before or with it (the collapsing layer's own update jumps once; that is not a
  step size).
* ``high_lr``: a too-large step moves every module at once: the update ratios of every layer stop
  shrinking and grow (or jump and stay), ||D3||/||D2|| or the attention logits grow; a D2-entropy
  collapse, if any, comes well after, or lies in one head alone (``LONE_PATH``: the
  low-precision fault reaches every head its kernel runs in).
* ``combined``: both: a collapse in two heads or more (or a layer's slow fall), and the step
  size growing just before it or with it in two or more update-ratio series, with the attention
  output projections' step size off across layers around it where the layout names them (the
  low-precision fault does not reach them); or a collapse next to one checkpoint at which the
  whole model's step size jumped, the output projections too (``detect.model_jump``: the run
  broke before a second checkpoint could show it), or at one checkpoint anywhere before it, by
  less (``JUMP_BEFORE_PATH``: the LR jumped at the fault's onset, the attention broke later).
* ``overflow``: NaN/Inf in weights with no earlier monitor alarm to explain it.
* ``healthy``: no sustained alarm and no overflow, over at least ``Params.min_examined`` points
  examined after the run settled.
* ``inconclusive``: no alarm either, but too little of the run could be examined to call it healthy
  (it never left its early phase, or too few points came after that); ``anomalous`` is False.

Only alarms triggered before the loss diverged decide (``horizon``); the order in which the first
of them moved, within ``DECISION_WINDOW`` points, is the cause.  ``confidence`` is the share of
right verdicts along the same decision path on the calibration runs (``CONFIDENCE``); a
``healthy`` verdict next to an uncounted whole-model step-size jump has a path of its own
(``HEALTHY_JUMP``): the weights said nothing else, but the LR may have been raised.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np

from ckptscan.judge.detect import COLLAPSE_JUMP, Alarm, ModelJump, Params
from ckptscan.judge.faults import UNKNOWN
from ckptscan.layouts.config import as_int

DECISION_WINDOW = 2  # points (checkpoints, or blocks of them) within which alarms count as together
# times the run's settled step (``coverage["settled_step"]``: the step at which its first layer
# settled, counted from step 0): a step size whose alarm triggered no longer than this before a
# collapse's grew with it (``combined``), however many points lie between them
STEP_FIRST_SPAN = 1.0
# a collapse with the output projections' step size this far over where it stood 1/3 to 2
# settling times before, across the model (``detect.projections_rise``): the LR grew with it
PROJ_RISE = 1.25

LR_ROLES = ("step_size", "second_order")

DEFAULT_RULES = Params()  # the rules the classifier reads where none are given (frozen)

# a collapse in one head alone, with the step size growing before it or with it: ``high_lr``
# (``LONE_PATH``), not ``combined`` (False: the rules before)
LONE_COLLAPSE = True
LONE_PATH = "high_lr/lone-collapse"

# the decision path of a collapse after the step size grew that is too shallow to be the
# low-precision fault's (``detect.Params.collapse_z``, ``collapse_fall``; ``_deep``)
SHALLOW_PATH = "high_lr/shallow-collapse"

# the decision path of a collapse read as combined from a whole-model jump that came before the
# decision window (``detect.Params.jump_before``)
JUMP_BEFORE_PATH = "combined/jump-before"

# the decision path of a loss that diverged with no monitor alarm (``_loss_diverged``)
LOSS_DIVERGED = "unknown/loss-diverged"

# the decision path of a verdict ``healthy`` next to a whole-model step-size jump that the jump rule
# did not count (``uncounted_jump``): the run may have had its LR raised
HEALTHY_JUMP = "healthy/uncounted-jump"

# Decision path -> (verdicts with the right class, verdicts) on the seen parts of the corpus:
# holdout35 to holdout44 (133 runs each), judged with the rules of 101ae58
# (``benchmarks/corpus/score.py --stored --confidence`` on the ten parts together prints it).
# ``LOSS_DIVERGED`` names no class: its confidence is 0.
CONFIDENCE: dict[str, tuple[int, int]] = {
    "healthy": (644, 701),
    # two of the four were benign schedule restarts (to half the peak LR), two raised LRs; the corpus
    # has no restart straight to the peak LR, which reads the same way
    HEALTHY_JUMP: (2, 4),
    "lowprec_attention": (127, 160),
    "lowprec_attention/projections-calm": (23, 23),  # q/k jumped with the collapse, the projections did not
    "high_lr/step-size": (61, 67),  # no collapse: the step size (or the second-order term) grew
    "high_lr/jump": (146, 153),  # no collapse: the whole model's step size jumped (``detect.jump_alarms``)
    "high_lr/rise": (7, 7),  # no collapse: the whole model's step size rose slowly (``detect.rise_alarms``)
    "high_lr/lift": (2, 2),  # no collapse: the step size rose off a level it held (``detect.lift_alarms``)
    "high_lr/step-size-first": (36, 41),  # the step size grew well before a collapse
    "high_lr/logits": (1, 1),  # no collapse, only attention logits grew
    "combined/together": (28, 33),  # a collapse with the step size growing in two or more series
    "combined/step-size-first": (72, 84),  # the step size grew before a collapse, within the window or span
    "combined/jump": (5, 5),  # a collapse with a one-checkpoint whole-model jump (``detect.model_jump``)
    "combined/projections-up": (2, 2),  # a collapse with the output projections over their earlier level
    LONE_PATH: (5, 7),  # a collapse in one head alone, after the step size grew or with it
    JUMP_BEFORE_PATH: (7, 12),  # a collapse after a whole-model jump x jump_before, before the window
    # added with the rule (``Params.collapse_z``), counted on the parts it was chosen on (holdout44 to
    # holdout55, rules of its freeze): the four wrong ones were combined runs
    SHALLOW_PATH: (15, 19),  # a shallow collapse after the step size grew
}


# how each whole-model step-size alarm (``detect`` test -> its reason's opening) reads in a verdict
_WHOLE_MODEL = {
    "jump": lambda factor, at: (
        f"the step size jumped at step {at}, x{factor:.1f} or more over its level just before"
    ),
    # the default window (detect.Params.rise_near = 6); score.py --set rise_near=N does not reword it
    "rise": lambda factor, at: (
        f"the step size rose slowly to x{factor:.2f} or more over where it stood 1/3 to 2 settling "
        f"times before, from step {at} on"
    ),
    "lift": lambda factor, at: (
        f"the step size rose to x{factor:.2f} or more over a level it had held, from step {at} on"
    ),
}


def confidence(path: str) -> float:
    """The share of verdicts taken along ``path`` that had the right class on the seen corpus parts
    (``CONFIDENCE``, every path counted under the same rules), with one right and one wrong
    verdict added (so that few runs give a cautious number): (right + 1) / (runs + 2); 0
    for ``LOSS_DIVERGED``, which names no class."""
    if path == LOSS_DIVERGED:
        return 0.0
    right, runs = CONFIDENCE.get(path, (0, 0))
    return round((right + 1) / (runs + 2), 2)


def classify(
    alarms: list[Alarm],
    overflow: list[dict],
    n_layers: int,
    steps,
    coverage: dict | None = None,
    horizon: int | None = None,
    proj_broad: np.ndarray | None = None,
    uncounted: list[Alarm] | None = None,
    model_jump: ModelJump | None = None,
    divergence: int | None = None,
    proj_rise: ModelJump | None = None,
    params: Params = DEFAULT_RULES,
) -> dict:
    """The ``verdict`` object of summary.json from sustained alarms and overflow findings.

    ``coverage`` (``examination``): how much of the run the detectors examined; a run without
    alarms is ``healthy`` only where that was enough, ``inconclusive`` otherwise.  ``horizon``:
    the step of the first point at or after the loss diverged, if it did (its updates began
    before); alarms triggered later do not decide the class.  ``proj_broad``: per scored point,
    whether the output projections' step size was off across layers (``Detection.proj_broad``:
    1/0, NaN unread; None where the run has none to read; NaN after the horizon).
    ``uncounted``: the alarms of a whole-model step-size jump the jump rule did not count
    (``Detection.uncounted``): reported as ``uncounted_jump`` where it came before the horizon,
    never part of the decision.  ``model_jump``: per checkpoint, the one-checkpoint whole-model
    step-size jump (``detect.model_jump``; factor NaN unread or at/after the divergence; None:
    nothing to read).  ``divergence``: the step at which the training loss diverged, as
    ``verdict.unseen_divergence`` reads it (None: it did not, there is no log, or it does not
    apply): a run whose loss diverged is never ``healthy`` or ``inconclusive`` (``LOSS_DIVERGED``).
    ``proj_rise``: per checkpoint, the output projections' step size over where it stood 1/3 to 2
    settling times before, across the model (``detect.projections_rise``; NaN unread or at/after
    the divergence; None: nothing to read).  ``params``: the rules the classifier reads
    (``detect.Params.jump_before``: the factor of a whole-model jump at any checkpoint before a
    collapse that makes it ``combined``, ``JUMP_BEFORE_PATH``; ``collapse_z`` and
    ``collapse_fall``: how deep a collapse that followed the step size must be to count as the
    low-precision fault's, ``SHALLOW_PATH``)."""
    verdict = _verdict(
        alarms,
        overflow,
        n_layers,
        coverage,
        horizon,
        proj_broad,
        model_jump,
        divergence,
        proj_rise,
        params,
    )
    note = uncounted_jump(uncounted or [], n_layers, horizon, steps)
    if note is not None:
        verdict["uncounted_jump"] = note
        if verdict.get("decision") == "healthy":  # no alarm, but the step size jumped: less sure
            verdict["decision"] = HEALTHY_JUMP
            verdict["confidence"] = confidence(HEALTHY_JUMP)
    return verdict


def uncounted_jump(
    uncounted: list[Alarm], n_layers: int, horizon: int | None = None, steps=None
) -> dict | None:
    """The verdict's ``uncounted_jump`` object (None: nothing to report): where and how far the
    whole model's step size jumped, in which layers, and why it raised no alarm.  Reported only
    where it came before the horizon (after the loss diverged, everything moves).  ``steps``: the
    run's checkpoint steps; the jump is read at a checkpoint, so the LR changed after the save
    before it (``after_step``), which the note names."""
    if not uncounted or (horizon is not None and uncounted[0].first_step > horizon):
        return None
    step = uncounted[0].first_step
    # floored (the note says "or more": x1.88 is not "x1.9 or more"), after rounding off float
    # error (1.15 stored as 1.1499... is not floored to 1.14)
    factor = math.floor(round(min(a.score for a in uncounted) * 100, 6)) / 100
    layers = sorted({a.layer for a in uncounted})
    before = [int(x) for x in (steps if steps is not None else []) if int(x) < step]
    after = max(before) if before else None
    where = f"between the saves at step {after} and step {step}" if after is not None else f"by step {step}"
    return {
        "step": int(step),
        "after_step": after,
        "confirmed_step": uncounted[0].confirmed_step,
        "factor": factor,
        "layers": layers,
        "shape": uncounted[0].shape,
        "note": (
            f"the whole model's step size jumped x{factor:.2f} or more {where}, in "
            f"{len(layers)} of "
            f"{max(1, n_layers)} layer(s), q/k and output projections together; the jump rule did not count "
            f"it: in too few of the layers did the step size go above the highest it had reached since the "
            f"layer settled (a schedule restart looks the same; so does an LR raised in a run that started "
            f"without warm-up). Check the LR schedule {'between those saves' if after is not None else 'there'}."
        ),
    }


def _verdict(
    alarms: list[Alarm],
    overflow: list[dict],
    n_layers: int,
    coverage: dict | None,
    horizon: int | None,
    proj_broad: np.ndarray | None,
    model_jump: ModelJump | None = None,
    divergence: int | None = None,
    proj_rise: ModelJump | None = None,
    params: Params = DEFAULT_RULES,
) -> dict:
    first_over = min(overflow, key=lambda f: f["step"]) if overflow else None
    if not alarms and first_over is None:
        if divergence is not None:
            return _loss_diverged(divergence, coverage)
        if coverage is not None and coverage["missing"]:
            return {
                "anomalous": False,
                "earliest_step": None,
                "confirmed_step": None,
                "fault_type": "inconclusive",
                "confidence": 0.0,
                "evidence": [],
                "reason": f"not enough evidence: {coverage['missing']}"
                + _unexamined(coverage)
                + _set_aside(coverage),
            }
        return {
            "anomalous": False,
            "earliest_step": None,
            "confirmed_step": None,
            "fault_type": "healthy",
            "confidence": confidence("healthy"),
            "decision": "healthy",
            "evidence": [],
            "reason": "no sustained alarm on any monitor, no NaN/Inf in weights"
            + _read_from(coverage)
            + _unexamined(coverage)
            + _set_aside(coverage),
        }

    # shown in the order the excursions began (the decision below follows the triggers)
    evidence = [a.as_dict() for a in sorted(alarms, key=lambda a: (a.first_step, a.index, -a.score))[:20]]
    # the run has been off since the earliest start of any alarm's excursion (an alarm's start
    # reaches back over the drift that led into its trigger); the first trigger decides the class
    earliest = min((a.first_step for a in alarms), default=None)
    if not alarms or (first_over is not None and first_over["step"] < earliest):
        over = cast(dict, first_over)  # without alarms there is an overflow: the healthy case returned above
        return {
            "anomalous": True,
            "earliest_step": int(over["step"]),
            "confirmed_step": int(over["step"]),
            "fault_type": "overflow",
            "confidence": 1.0,
            "evidence": evidence,
            "overflow": _overflow(over),
            "reason": "NaN/Inf in weights before (or without) any monitor alarm",
        }

    # the class is read from what moved before the loss diverged (after it, everything moves);
    # without such alarms, from all of them
    fault, path, reason, window, since = _signature(
        decisive(alarms, horizon),
        n_layers,
        proj_broad,
        model_jump,
        (coverage or {}).get("settled_step"),
        proj_rise,
        params,
    )
    # evidence that is not an alarm (``combined/jump``, ``JUMP_BEFORE_PATH``): the run is off since it
    if since is not None:
        earliest = min(cast(int, earliest), since)
    # when a monitor reading the checkpoints as they came could have raised it: the first alarm
    # to complete its persistence rule (not necessarily the one that started earliest)
    confirmed = min((a.confirmed_step for a in alarms if a.confirmed_step is not None), default=None)
    out: dict[str, Any] = {
        "anomalous": True,
        "earliest_step": int(cast(int, earliest)),  # alarms is not empty here
        "confirmed_step": confirmed,
        "fault_type": fault,
        "confidence": confidence(path),
        "decision": path,
        "evidence": evidence,
        "reason": reason,
        "decided_by": [a.as_dict() for a in window],
    }
    if first_over is not None:
        out["overflow"] = _overflow(first_over)
    return out


def _set_aside(coverage: dict | None) -> str:
    """The words a verdict without alarms adds about alarms set aside on dormant layers
    (``coverage["dormant_alarms"]``, ``detect._drop_asleep``); empty where there were none."""
    d = (coverage or {}).get("dormant_alarms")
    if not d:
        return ""
    return (
        f"; {d['alarms']} alarm(s) set aside on layer(s) {d['layers']} from step {d['first_step']}: the "
        f"layer (or head) stood under {d['dormant_ratio']:g} of the largest head's ||M|| there, read as "
        f"not learning yet, so those alarms were not counted (a fault that began there would be missed)"
    )


def _read_from(coverage: dict | None) -> str:
    """The words a ``healthy`` verdict adds about the stretch before the first examined step: a
    fault that began there sits in the per-series tests' baseline (from the settling on) or in the
    run's early phase, where only the whole-model rules read it; empty where the coverage does not
    give both steps."""
    first = as_int((coverage or {}).get("first_examined_step"))
    settled = as_int((coverage or {}).get("settled_step"))
    if first is None or settled is None:
        return ""
    return (
        f"; the per-series tests read from step {first} on: a fault that began before it (from step "
        f"{settled}, in their baseline; before that, in the run's early phase) is seen only by the "
        f"whole-model rules"
    )


def _unexamined(coverage: dict | None) -> str:
    """The words a verdict without alarms adds about layers that never settled and so were never
    examined (``coverage["layers_not_examined"]``); empty where every layer was."""
    layers = (coverage or {}).get("layers_not_examined") or []
    if not layers or (coverage or {}).get("settled_step") is None:  # none settled: ``missing`` says so
        return ""
    return f"; layer(s) {sorted(layers)} were not examined (they settled too late, or never)"


def examined_before(coverage: dict, step: int | None) -> bool:
    """Whether the detectors examined any checkpoint before ``step`` (``coverage``:
    ``detection.coverage``; a ``first_examined_step`` that is no whole number counts as none;
    ``step`` None: whether they examined anything)."""
    first = as_int(coverage.get("first_examined_step"))
    return first is not None and (step is None or first < step)


def _unread_why(step: int, coverage: dict | None) -> str:
    """Why the monitors said nothing before a loss that diverged at ``step``: no checkpoint before
    it was examined (the run settled, or was first scored, at or after it), or they did not read the
    fault in what they examined."""
    if coverage is None:
        return "the monitors did not read this fault (it may have begun before the run settled)"
    first, settled = coverage.get("first_examined_step"), coverage.get("settled_step")
    if not examined_before(coverage, step):
        when = f"the run settled at step {settled}" if settled is not None else "the run never settled"
        scored = f", first examined at step {first}" if first is not None else ""
        return f"no checkpoint before the divergence was examined ({when}{scored})"
    return (
        f"the monitors did not read this fault in the checkpoints examined from step {first} (it may "
        "have begun before then)"
    )


def _loss_diverged(step: int, coverage: dict | None) -> dict:
    """The verdict of a run whose training loss diverged at ``step`` while no monitor raised an
    alarm and no weight went NaN/Inf: anomalous, its class ``unknown``, dated at that step.  The
    loss left its best by a nat (or went NaN/Inf): whatever the monitors missed, the run is not
    healthy, and an examination too short for a verdict does not make it less anomalous.  Its
    confidence is 0: no class is named."""
    missing = (coverage or {}).get("missing")
    if (
        coverage is not None
        and coverage.get("settled_step") is not None
        and not examined_before(coverage, step)
    ):
        # the run settled, but nothing before the divergence was examined (the reason says so): how
        # many points came after it is moot (a run that never settled keeps what says why)
        missing = None
    return {
        "anomalous": True,
        "earliest_step": int(step),
        "confirmed_step": int(step),
        "fault_type": UNKNOWN,
        "confidence": confidence(LOSS_DIVERGED),
        "decision": LOSS_DIVERGED,
        "evidence": [],
        "reason": (
            f"the training loss diverged at step {step} with no monitor alarm counted and no NaN/Inf "
            f"in weights: {_unread_why(step, coverage)}, so its class is not known"
            + (f"; too little was examined for a verdict from the monitors: {missing}" if missing else "")
            + _unexamined(coverage)
            + _set_aside(coverage)
        ),
    }


def decisive(alarms: list[Alarm], horizon: int | None) -> list[Alarm]:
    """The alarms the class is read from: those triggered at or before ``horizon`` (the point that
    holds the divergence), all of them where none was."""
    return [a for a in alarms if horizon is None or a.trigger_step <= horizon] or alarms


def collapse_at(alarms: list[Alarm]) -> tuple[int, int] | None:
    """(point, trigger step) of the first D2-entropy collapse (structure alarm) among ``alarms``;
    None where there is none."""
    structure = [a for a in alarms if a.role == "structure"]
    if not structure:
        return None
    s0 = min(a.index for a in structure)
    return s0, min(a.trigger_step for a in structure if a.index == s0)


def _collapsed_where(heads: set[tuple[int, int | None]]) -> str:
    """Where the structure alarms of a collapse lie, in words: per head (a head's own alarm), or
    across layers (``detect.fall_alarms``, ``detect.early_fall_alarms``: the median head of each
    layer, head None)."""
    own = {(layer, head) for layer, head in heads if head is not None}
    fell = sorted({layer for layer, head in heads if head is None})
    parts = (
        [f"collapsed in {len(own)} head(s) of layer(s) {sorted({layer for layer, _ in own})}"] if own else []
    )
    parts += [f"fell across layer(s) {fell} (the median of each layer's heads)"] if fell else []
    return " and ".join(parts)


def _deep(structure: list[Alarm], params: Params) -> Alarm | None:
    """The first structure alarm of a collapse deep enough to be the low-precision fault's (None:
    none is): a z-scored D2-entropy alarm (``detect`` test "level", the per-series tests) peaking
    at ``params.collapse_z`` or more, two heads' D2 entropy under ``Params.depth`` of their settled
    level together (``depth_alarms``), a fall before a divergence (``early_fall_alarms``: under
    half its level), or a layer's slow fall of ``params.collapse_fall`` or more (``fall_alarms``,
    its score the fall at its first checkpoint, in entropy units, not the deepest it went).
    ``structure``: every structure alarm before the horizon, not only those of the decision
    window (a collapse deepens over several saves).  A level alarm's peak is read over its whole
    sustained stretch, which can run past the horizon.  A z cannot exceed the head's settled level
    over the detector's floor (0.05): at levels under 0.5 no z reaches 10, and a head that falls
    alone to nothing counts only through a second head's depth alarm."""
    for a in structure:
        if a.test in ("depth", "early-fall"):
            return a
        if a.test == "fall":
            if a.score >= params.collapse_fall:
                return a
        elif a.test in ("level", "rate", "shift", "") and a.score >= params.collapse_z:
            return a
    return None


def _lone_head(heads: set[tuple[int, int | None]]) -> bool:
    """The collapse's structure alarms lie in one head alone (no other head's, no layer's slow
    fall).  Head None is a layer's reading (a slow fall, or a layout with one head per layer,
    whose series are per layer): never one head."""
    return len(heads) == 1 and next(iter(heads))[1] is not None


def _is_attention_step(a: Alarm) -> bool:
    return a.role == "step_size" and a.block.startswith("attn")


def _projections_calm(proj_broad: np.ndarray | None, s0: int, since: int | None = None) -> bool:
    """The output projections were read within ``DECISION_WINDOW`` points of the collapse at point
    ``s0`` (and from ``DECISION_WINDOW`` points before ``since`` on, the point where the q/k step
    size grew, where that came earlier) and their step size was off across layers nowhere there
    (``detect._proj_broad``: 1 off, 0 not, NaN unread; None: nothing to read).  Then a q/k step
    size growing with the collapse is the collapsing layers' own update jumping, not a step size.
    Since ``detect.Params.step_proj`` such a q/k alarm rarely starts at all (the projections calm
    within ``step_proj_window`` points of its first point hold it back): this path is left for a
    q/k alarm whose own window was unread, or whose projections moved only outside it."""
    if proj_broad is None:
        return False
    start = min(s0, since) if since is not None else s0
    around = proj_broad[max(0, start - DECISION_WINDOW) : s0 + DECISION_WINDOW + 1]
    return bool(np.isfinite(around).any()) and not bool((around == 1).any())


def jump_with(
    model_jump: ModelJump | None, s0: int, until: int, window: int = DECISION_WINDOW
) -> tuple[float, int] | None:
    """(factor, step) of the largest one-checkpoint whole-model step-size jump
    (``detect.model_jump``) at the checkpoints of the collapse's point ``s0`` and of the
    ``window`` points before it (``DECISION_WINDOW``; ``s0``: every point up to it), up to the
    collapse's trigger step ``until`` (None: none read there).  After the collapse, not read: a
    collapsing layer moves.  ``combined/jump`` where the factor reaches ``COLLAPSE_JUMP`` within
    ``DECISION_WINDOW``, ``JUMP_BEFORE_PATH`` where it reaches ``Params.jump_before`` at any point
    up to ``s0`` (that window included, where ``COLLAPSE_JUMP`` is not reached).
    Read the same way on ``detect.projections_rise`` (``combined/projections-up`` where it
    reaches ``PROJ_RISE``)."""
    if model_jump is None:
        return None
    near = (model_jump.point >= s0 - window) & (model_jump.point <= s0) & (model_jump.step <= until)
    read = np.flatnonzero(near & np.isfinite(model_jump.factor))
    if not len(read):
        return None
    i = read[int(np.argmax(model_jump.factor[read]))]
    return float(model_jump.factor[i]), int(model_jump.step[i])


def _signature(
    alarms: list[Alarm],
    n_layers: int,
    proj_broad: np.ndarray | None = None,
    model_jump: ModelJump | None = None,
    settled_step: int | None = None,
    proj_rise: ModelJump | None = None,
    params: Params = DEFAULT_RULES,
) -> tuple[str, str, str, list[Alarm], int | None]:
    """(fault class, decision path, reason, the alarms that decided) from the alarms, in trigger
    order.

    * a D2-entropy collapse (structure) and the attention step size (q/k update ratios; an alarm
      that is broad by construction) growing more than ``DECISION_WINDOW`` points before it, and
      more than ``STEP_FIRST_SPAN`` times the run's settled step (``settled_step``; the two alarms'
      trigger steps compared) before it where that is known: ``high_lr`` (the collapse is its
      consequence); growing before it, but within that window or span, or with it in two or more
      update-ratio series (q, k, router) at least one of them attention's:
      ``combined`` (the low-precision fault makes a collapsing layer's own update jump, once, never
      the step size grow before the collapse), provided the collapse is not in one head alone
      (``_lone_head``; ``LONE_COLLAPSE``: ``high_lr``, ``LONE_PATH``, read after the
      projections-calm test below) and the output projections' step size was off
      across layers within the window as well (or moved: a ``jump``, ``rise`` or ``lift`` alarm there), where they are
      read (``proj_broad``, per point, from the window before the step size grew; the fault leaves
      them alone):
      ``lowprec_attention/projections-calm`` otherwise; where it followed the step size
      (``combined/step-size-first``) but stayed shallow in every structure alarm before the
      horizon (``_deep``, ``Params.collapse_z``): ``high_lr``, ``SHALLOW_PATH``, read after the
      lone head. A collapse without that step-size growth: where the whole model's step size
      jumped x``COLLAPSE_JUMP`` at one checkpoint, q/k and output projections together, at the
      collapse or within the window before it (``model_jump``): ``combined/jump``; else, where it
      jumped x``jump_before`` at one checkpoint anywhere up to the collapse's point, that window
      included (``JUMP_BEFORE_PATH``: the LR moved before the collapse; this jump, like the one
      above, also rules out the projections-calm reading, so that a collapse with the step size
      growing takes the combined path its step-size alarms name); else, where the output
      projections' step size stood x``PROJ_RISE`` over where it was 1/3 to 2 settling times
      before, across the model, at one of those checkpoints (``proj_rise``):
      ``combined/projections-up``; else ``lowprec_attention``;
    * no collapse: ``high_lr``: ``high_lr/jump`` where a whole-model jump is among the first
      alarms, else ``high_lr/rise`` where a whole-model slow rise is, else ``high_lr/lift`` where a
      whole-model lift off a held level is (``detect.lift_alarms``), else ``high_lr/step-size``
      (step-size or second-order growth); ``high_lr/logits`` where only logits grew, the classic
      sign of a too-large step (in two layers or more where the model has two:
      ``detect.Params.logits_lone``)."""
    n_layers = max(1, n_layers)
    structure = [a for a in alarms if a.role == "structure"]
    growth = [a for a in alarms if a.role == "step_size"]  # broad by construction (detect._broad, proj_calm)
    collapse = collapse_at(structure)
    if collapse is not None:
        s0, until = collapse
        first = min(
            (a for a in growth if _is_attention_step(a)),
            key=lambda a: (a.index, a.trigger_step),
            default=None,
        )
        u0 = first.index if first is not None else None
        heads = {(a.layer, a.head) for a in structure if a.index <= s0 + DECISION_WINDOW}
        where = _collapsed_where(heads)
        # within the span (the run's own time scale): the step size grew with the collapse
        gap = until - first.trigger_step if first is not None else None
        within = gap is not None and settled_step is not None and gap <= STEP_FIRST_SPAN * settled_step
        if u0 is not None and u0 < s0 - DECISION_WINDOW and not within:
            window = [a for a in alarms if a.index <= u0 + DECISION_WINDOW]
            grew = sorted({a.layer for a in window if a.role in LR_ROLES})
            return (
                "high_lr",
                "high_lr/step-size-first",
                (
                    f"the step size grew in layer(s) {grew} {s0 - u0} points ({gap} steps) "
                    f"before any D2-entropy collapse (the collapse followed it)"
                ),
                window,
                None,
            )
        window = [a for a in alarms if a.index <= s0 + DECISION_WINDOW]
        near = {(a.layer, a.monitor) for a in growth if a.index <= s0 + DECISION_WINDOW}
        if u0 is not None and u0 < s0 - DECISION_WINDOW:  # within the span
            why = (
                f"the attention step size grew {s0 - u0} point(s), {gap} steps, before it (within the "
                f"{settled_step} steps the run took to settle)"
            )
        elif u0 is not None and u0 < s0:
            why = f"the attention step size grew {s0 - u0} point(s) before it"
        elif u0 is not None and u0 <= s0 + DECISION_WINDOW and len(near) >= 2:
            why = f"the step size grew with it, in {len(near)} update-ratio series"
        else:
            why = None
        # a step-size jump, rise or lift (``detect.jump_alarms``, ``rise_alarms``, ``lift_alarms``) is the output
        # projections' step size moving too
        jump_near = any(a.test in ("jump", "rise", "lift") for a in growth if a.index <= s0 + DECISION_WINDOW)
        # the whole model's step size jumped at one checkpoint, at or just before the collapse
        spike = jump_with(model_jump, s0, until)
        if spike is not None and not spike[0] >= COLLAPSE_JUMP:
            spike = None
        # ... or a smaller one at any checkpoint before the collapse: the LR moved before it
        jump_before = params.jump_before
        before = jump_with(model_jump, s0, until, window=s0) if spike is None and jump_before > 0 else None
        if before is not None and not before[0] >= jump_before:
            before = None
        if (
            why is not None
            and not jump_near
            and spike is None
            and before is None
            and _projections_calm(proj_broad, s0, u0)
        ):
            return (
                "lowprec_attention",
                "lowprec_attention/projections-calm",
                (
                    f"D2 spectral entropy {where}; the q/k "
                    f"updates jumped with it, but the output projections' step size did not grow across "
                    f"layers (the low-precision fault moves q/k only)"
                ),
                window,
                None,
            )
        if why is None and spike is not None:
            factor, at = spike
            return (
                "combined",
                "combined/jump",
                (
                    f"D2 spectral entropy {where}, and at "
                    f"step {at}, with it or just before, the whole model's step size jumped x{factor:.1f}, "
                    f"the attention q/k updates and the output projections together (a step size the "
                    f"low-precision fault cannot make)"
                ),
                window,
                at,
            )
        if why is None and before is not None:
            factor, at = before
            return (
                "combined",
                JUMP_BEFORE_PATH,
                (
                    f"D2 spectral entropy {where}, and at or before it, at step {at}, the whole model's step "
                    f"size jumped x{factor:.2f} at one checkpoint, the attention q/k updates and the output "
                    f"projections together (the LR moved; the low-precision fault moves q/k only)"
                ),
                window,
                at,
            )
        # the output projections above where they stood two settling times before, across the
        # model, at or just before the collapse: the LR grew (the fault leaves them alone)
        proj_up = jump_with(proj_rise, s0, until)
        if why is None and proj_up is not None and proj_up[0] >= PROJ_RISE:
            factor, at = proj_up
            return (
                "combined",
                "combined/projections-up",
                (
                    f"D2 spectral entropy {where}, and at step {at}, with it or just before, the output "
                    f"projections' step size stood x{factor:.1f} over where it was 1/3 to 2 settling times "
                    f"before, across the model (a step size the low-precision fault cannot make; after "
                    f"the run settles it falls or holds)"
                ),
                window,
                None,
            )
        if why is None:
            return (
                "lowprec_attention",
                "lowprec_attention",
                (f"D2 spectral entropy {where} first, while the step size did not grow across layers"),
                window,
                None,
            )
        assert u0 is not None  # ``why`` is set only where the step size grew
        if LONE_COLLAPSE and _lone_head(heads):
            return (
                "high_lr",
                LONE_PATH,
                (
                    f"D2 spectral entropy {where} only, and {why}: a collapse confined to one head "
                    f"is the step size's doing (the low-precision fault reaches every head it runs in)"
                ),
                window,
                None,
            )
        deep = _deep(structure, params) if params.collapse_z > 0 else None
        if u0 < s0 and params.collapse_z > 0 and deep is None:
            return (
                "high_lr",
                SHALLOW_PATH,
                (
                    f"D2 spectral entropy {where}, and {why}, but the collapse stayed shallow (no "
                    f"z-scored D2 alarm peaked at z {params.collapse_z:g} or more, no two heads fell "
                    f"under {params.depth:g} of their level together, no layer fell by "
                    f"{params.collapse_fall:g}): the step size's doing (the low-precision fault's "
                    f"collapses go deeper)"
                ),
                window,
                None,
            )
        if u0 < s0 and deep is not None and deep not in window:  # the depth after the window decided too
            window = [*window, deep]
        path = "combined/step-size-first" if u0 < s0 else "combined/together"
        return (
            "combined",
            path,
            (f"D2 spectral entropy {where}, and {why} (a step size the low-precision fault cannot make)"),
            window,
            None,
        )
    first = alarms[0]
    window = [a for a in alarms if a.index <= first.index + DECISION_WINDOW]
    lr = [a for a in window if a.role in LR_ROLES]
    layers = {a.layer for a in (lr or window)}
    # a whole-model step-size alarm among the first alarms: a jump, else a slow rise, else a lift
    for test in ("jump", "rise", "lift"):
        hits = [a for a in lr if a.test == test]
        if hits and min(a.index for a in hits) == first.index:
            factor, at = min(a.score for a in hits), min(a.first_step for a in hits)
            return (
                "high_lr",
                f"high_lr/{test}",
                f"{_WHOLE_MODEL[test](factor, at)}, in {len({a.layer for a in hits})} of {n_layers} "
                f"layer(s), the attention q/k updates and the output projections together, with no "
                f"D2 entropy collapse first",
                window,
                None,
            )
    if lr:
        return (
            "high_lr",
            "high_lr/step-size",
            (
                f"step size grew in {len(layers)} of {n_layers} layer(s) "
                f"({', '.join(sorted({a.block for a in lr}))}) with no D2 entropy collapse first"
            ),
            window,
            None,
        )
    # only attention logits grew (||M||), the classic sign of a too-large step (attention logit
    # growth), which the low-precision fault brings only with or after the collapse of D2
    return (
        "high_lr",
        "high_lr/logits",
        (
            f"attention logits (||M||) grew in {len(layers)} of {n_layers} layer(s) "
            f"with no D2 entropy collapse first and no step-size alarm"
        ),
        window,
        None,
    )


def _overflow(f: dict) -> dict:
    return {
        "step": int(f["step"]),
        "layer": f.get("layer"),
        "tensors": list(f.get("tensors", [])),
        "nonfinite": f.get("nonfinite"),
    }
