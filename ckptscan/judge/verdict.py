"""The judgement of a run: training log + detection + classification -> the summary.json keys.

``judge`` is what ``ckptscan.api.analyze`` calls once the timeline is assembled (and a reference
run, if any, analysed).  It returns
``verdict``, ``loss``, ``lead_time_steps``, ``log_only_lead_time_steps``, ``alarms`` (first alarm
per watched series), ``log`` (where the loss curve came from) and ``baseline`` (reference run used,
if any).  Everything is JSON-serialisable with ``allow_nan=False``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ckptscan.judge import classify, detect, logs


def _layers(timeline) -> int:
    return max((timeline.get(n).shape[1] for n in timeline.names()), default=0)


REFERENCE_BASELINE = "reference-run"  # ``detection.baseline`` of a run judged against a reference run


@dataclass(frozen=True)
class Reference:
    """A healthy reference run's timeline (``--baseline``), analysed by the caller
    (``ckptscan.api.analyze``), with where it came from."""

    timeline: object  # ``ckptscan.store.timeline.Timeline``
    run: str  # the reference run folder
    out: str | None = None  # where its analysis is cached


def _clean(o):
    """JSON-safe copy: non-finite floats -> None, numpy scalars -> Python."""
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, (float, np.floating)):
        return float(o) if math.isfinite(o) else None
    return o


def judge(
    run_dir,
    timeline,
    findings,
    log_file=None,
    reference: Reference | None = None,
    checkpoint_steps=None,
    params: detect.Params | None = None,
    loss: dict | None = None,
    log_step_offset: int = 0,
) -> dict:
    """Judge one analysed run (pure: reads the run's log, computes nothing from checkpoints).
    ``reference``: a healthy run's timeline to compare against step by step (``Reference``).
    ``checkpoint_steps``: every checkpoint step discovery found (default: the timeline's), checked
    against the log's steps; when they cannot be aligned the lead time is not reported.
    ``params``: the detection parameters (the defaults are the documented ones); ``loss``: a
    ``logs.summarize`` result already at hand (it is read from the run otherwise).  Sets
    ``timeline.scores`` to the detector scores the alarms were raised on (stored with it)."""
    params = params if params is not None else detect.Params()
    loss = loss if loss is not None else logs.summarize(run_dir, log_file, log_step_offset)
    log = dict(loss["log"])
    curve = loss["curve"]
    misaligned = None
    if curve is not None:
        ck = timeline.steps if checkpoint_steps is None else checkpoint_steps
        misaligned = logs.alignment_problem(curve.steps, ck)
        log["aligned"] = misaligned is None
        log["notes"] = [*log["notes"], *([misaligned] if misaligned else [])]
    detection = detect.run_detection(
        timeline, params, reference=reference.timeline if reference is not None else None
    )
    alarms = detection.alarms
    timeline.scores = detection.scores  # what the alarms were raised on, stored beside the monitors
    coverage = detect.examination(detection, timeline.steps, params)
    div = loss["divergence_step"]
    diverged = unseen_divergence(loss, timeline.steps, misaligned)  # a lasting one, log aligned
    first = coverage.get("first_examined_step")
    if diverged is not None and (first is None or first >= diverged):  # examined only after it
        early = detect.early_fall_alarms(timeline, diverged, detection.starts, params, detection.point_of)
        if early:  # in point order, as the detectors' alarms are
            alarms = sorted([*alarms, *early], key=lambda a: (a.index, -a.score))
    overflow = [f for f in findings if f.get("kind") == "overflow"]
    # alarms triggered after the point that holds the divergence do not decide the class
    horizon = detection.point_at_or_after(div)
    verdict = classify.classify(
        alarms,
        overflow,
        _layers(timeline),
        timeline.steps,
        coverage,
        horizon=horizon,
        proj_broad=_until(detection, horizon),
        model_jump=jump_before(detection, div),
        proj_rise=before_divergence(detection.proj_rise, div),
        # read on single checkpoints: before the divergence step itself, not its block's label
        uncounted=[a for a in detection.uncounted if div is None or a.first_step < div],
        divergence=diverged,
        params=params,
    )

    held = _held(timeline, reference.timeline) if reference is not None else None
    log_alarm = loss["log_only_alarm_step"]
    earliest = verdict["earliest_step"]
    lead = div - earliest if (div is not None and earliest is not None and not misaligned) else None
    log_lead = div - log_alarm if (div is not None and log_alarm is not None) else None
    out = {
        "verdict": verdict,
        "loss": {
            "divergence_step": div,
            "log_only_alarm_step": log_alarm,
            "log_only_alarm_steps": loss.get("log_only_alarm_steps", []),
            "divergence_rule": {"ema_beta": logs.EMA_BETA, "margin_nats": logs.DIVERGENCE_MARGIN},
            "log_only_rule": {
                "window": logs.SPIKE_WINDOW,
                "sigmas": logs.SPIKE_SIGMAS,
                "min_std": logs.SPIKE_MIN_STD,
                "series": ["loss", "grad_norm"],
            },
        },
        "lead_time_steps": lead,
        "log_only_lead_time_steps": log_lead,
        "alarms": detect.first_alarms_by_monitor(alarms),
        "log": log,
        "detection": {
            "baseline": REFERENCE_BASELINE if reference is not None else "self",
            "coverage": coverage,
            "reference_run": reference.run if reference is not None else None,
            # the last common checkpoint up to which the two runs' weights matched (None: none)
            "reference_shared_until": detection.shared_until,
            # [this run's checkpoints the reference run holds too, this run's checkpoints]
            "reference_steps_held": held,
            # it holds every checkpoint of this run, with the same weights: nothing differs to read
            "reference_identical": (
                held is not None
                and held[1] > 0
                and held[0] == held[1]
                and detection.shared_until == int(timeline.steps[-1])
            ),
            # what the reference run was read for (``detect.reference_scope``); None: no reference
            "reference_scope": detection.reference_scope,
            "reference_out": reference.out if reference is not None else None,
            **vars(params),
        },
    }
    return _clean(out)


def _held(timeline, ref_timeline) -> list[int]:
    """[how many of the run's checkpoint steps the reference run holds too, how many it has]."""
    theirs = {int(s) for s in ref_timeline.steps}
    return [sum(int(s) in theirs for s in timeline.steps), len(timeline.steps)]


def unseen_divergence(loss: dict, steps, misaligned: str | None) -> int | None:
    """The step at which the training loss diverged, as the ``unknown/loss-diverged`` verdict reads
    it (None: it does not apply): only where the log aligns with the checkpoints, the loss stayed
    diverged (``logs.lasting_divergence_step``: a lone NaN loss followed by finite ones is not a
    divergence) and it diverged within the checkpoints analysed, or at most one save interval after
    the last of them (the run broke before its next save; a run analysed up to an earlier step
    with ``--steps`` is judged on what was analysed)."""
    steps = np.asarray(steps, dtype=np.int64)
    if loss["divergence_step"] is None or misaligned or len(steps) == 0:
        return None
    curve = loss.get("curve")
    step = (
        logs.lasting_divergence_step(curve.steps.tolist(), curve.loss.tolist())
        if curve is not None and len(curve)
        else loss["divergence_step"]
    )
    interval = int(np.median(np.diff(steps))) if len(steps) > 1 else 0
    return step if step is not None and step <= int(steps[-1]) + interval else None


def jump_before(detection: detect.Detection, divergence: int | None) -> detect.ModelJump | None:
    """``detection.model_jump`` unread (NaN) at the checkpoints at or after the divergence step (it
    is read on single checkpoints, like ``uncounted``): after it everything moves."""
    return before_divergence(detection.model_jump, divergence)


def before_divergence(mj: detect.ModelJump | None, divergence: int | None) -> detect.ModelJump | None:
    """A per-checkpoint reading (``Detection.model_jump``, ``Detection.proj_rise``) unread (NaN) at
    the checkpoints at or after the divergence step."""
    if mj is None or divergence is None:
        return mj
    return mj._replace(factor=np.where(mj.step >= divergence, np.nan, mj.factor))


def _until(detection: detect.Detection, horizon: int | None):
    """``detection.proj_broad`` unread (NaN) after ``horizon``, the point that holds the
    divergence: after it everything moves, the output projections too."""
    pb = detection.proj_broad
    if pb is None or horizon is None or detection.point_steps is None:
        return pb
    return np.where(np.asarray(detection.point_steps) > horizon, np.nan, pb)
