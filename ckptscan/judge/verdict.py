"""The judgement of a run: training log + detection + classification -> the summary.json keys.

``judge`` is what ``ckptscan.api.analyze`` calls once the timeline is assembled.  It returns
``verdict``, ``loss``, ``lead_time_steps``, ``log_only_lead_time_steps``, ``alarms`` (first alarm
per watched series), ``log`` (where the loss curve came from) and ``baseline`` (reference run used,
if any).  Everything is JSON-serialisable with ``allow_nan=False``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ckptscan.judge import classify, detect, logs


def _layers(timeline) -> int:
    return max((timeline.get(n).shape[1] for n in timeline.names()), default=0)


def _reference_timeline(baseline, analyze_kwargs: dict | None):
    """Analyse the healthy reference run (results cached beside this run's output folder)."""
    from ckptscan.api import analyze
    from ckptscan.pipeline.analyzer import baseline_out_dir

    kw = dict(analyze_kwargs or {})
    out = kw.pop("out_dir", None)
    kw.pop("log_file", None)
    kw.pop("baseline", None)
    base = Path(baseline)
    if out is not None:
        cache = baseline_out_dir(Path(out), base)
    else:
        cache = Path.cwd() / "ckptscan-out" / "baselines" / base.resolve().name
    res = analyze(base, out_dir=cache, **{k: v for k, v in kw.items() if v is not None or k == "steps"})
    return res.timeline, str(cache)


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


def judge(run_dir, timeline, findings, log_file=None, baseline=None, analyze_kwargs=None,
          checkpoint_steps=None, params: detect.Params | None = None, loss: dict | None = None,
          log_step_offset: int = 0) -> dict:
    """``checkpoint_steps``: every checkpoint step discovery found (default: the timeline's), checked
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
    reference, ref_out = (None, None)
    if baseline is not None:
        reference, ref_out = _reference_timeline(baseline, analyze_kwargs)
    detection = detect.run_detection(timeline, params, reference=reference)
    alarms = detection.alarms
    timeline.scores = detection.scores  # what the alarms were raised on, stored beside the monitors
    coverage = detect.examination(detection, timeline.steps, params)
    overflow = [f for f in findings if f.get("kind") == "overflow"]
    # alarms triggered after the point that holds the divergence do not decide the class
    verdict = classify.classify(alarms, overflow, _layers(timeline), timeline.steps, coverage,
                                horizon=detection.point_at_or_after(loss["divergence_step"]))

    div = loss["divergence_step"]
    log_alarm = loss["log_only_alarm_step"]
    earliest = verdict["earliest_step"]
    lead = div - earliest if (div is not None and earliest is not None and not misaligned) else None
    log_lead = div - log_alarm if (div is not None and log_alarm is not None) else None
    out = {
        "verdict": verdict,
        "loss": {"divergence_step": div, "log_only_alarm_step": log_alarm,
                 "log_only_alarm_steps": loss.get("log_only_alarm_steps", []),
                 "divergence_rule": {"ema_beta": logs.EMA_BETA, "margin_nats": logs.DIVERGENCE_MARGIN},
                 "log_only_rule": {"window": logs.SPIKE_WINDOW, "sigmas": logs.SPIKE_SIGMAS,
                                   "min_std": logs.SPIKE_MIN_STD, "series": ["loss", "grad_norm"]}},
        "lead_time_steps": lead,
        "log_only_lead_time_steps": log_lead,
        "alarms": detect.first_alarms_by_monitor(alarms),
        "log": log,
        "detection": {"baseline": "reference-run" if reference is not None else "self", "coverage": coverage,
                      "reference_run": str(baseline) if baseline is not None else None,
                      "reference_out": ref_out, **vars(params)},
    }
    return _clean(out)
