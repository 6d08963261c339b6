"""What every report shows, computed once from a Result: leading monitors, per-layer matrices,
downsampled series, the loss curve.  Terminal, HTML and CI renderers only format these.

Nothing here decides anything: the verdict comes from detection (``summary["verdict"]``); this module
only arranges the stored numbers for display, and tolerates summaries that lack optional keys.
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass

import numpy as np

from ckptscan.judge.classify import LOSS_DIVERGED, examined_before
from ckptscan.judge.detect import REFERENCE_NONE, REFERENCE_STEPS
from ckptscan.judge.logs import MAX_LISTED_ALARMS
from ckptscan.judge.verdict import REFERENCE_BASELINE
from ckptscan.layouts.config import as_int
from ckptscan.monitors import names as series_names

# Shown when the verdict names no evidence (a healthy run): the monitors the notes call primary.
DEFAULT_LEADING = (
    "attn.D2.entropy2",
    "attn.M.entropy2",
    "router.similarity",
    "act.attn.max_logit",
    "act.router.entropy_mean",
)


@dataclass(frozen=True)
class MonitorInfo:
    name: str
    family: str
    scope: str  # "head" | "layer"
    direction: str  # "down" | "up" | "both"
    description: str


def monitor_info(name: str) -> MonitorInfo:
    """Registry entry of a series, with a best guess from its name when it is not registered
    (a stored result may come from a newer ckptscan with monitors this one does not know)."""
    from ckptscan.monitors import spec

    try:
        s = spec(name)
        return MonitorInfo(name, s.family, s.scope, s.direction, s.description)
    except KeyError:
        pass
    return MonitorInfo(name, _guess_family(name), "head", "both", "")


def _guess_family(name: str) -> str:
    """The family of an unregistered series: that of a registered series with the same prefix."""
    from ckptscan.monitors import REGISTRY

    split = series_names.split
    block = split(name)[0]
    sub = split(split(name)[1])[0] if block == "act" else None
    for s in REGISTRY.values():
        b = split(s.name)[0]
        if (b == block or series_names.is_attention(name) and series_names.is_attention(s.name)) and (
            sub is None or split(split(s.name)[1])[0] == sub
        ):
            return s.family
    return "other"


def families(names) -> dict[str, list[str]]:
    """Monitor names grouped by family, families in the canonical order, names sorted."""
    out: dict[str, list[str]] = {}
    for n in sorted(names):
        out.setdefault(monitor_info(n).family, []).append(n)
    from ckptscan.monitors import family_order

    order = {f: i for i, f in enumerate(family_order())}
    return dict(sorted(out.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))


# --- the verdict state every output shows -----------------------------------------------------------

# the four states, in the words every output uses (terminal and HTML in capitals)
ANOMALOUS, INCONCLUSIVE, HEALTHY, NO_VERDICT = "anomalous", "inconclusive", "healthy", "no verdict"
STATES = (ANOMALOUS, INCONCLUSIVE, HEALTHY, NO_VERDICT)


@dataclass(frozen=True)
class Outcome:
    """What the run's headline says, identically in the terminal, the HTML report, summary.json
    (``outcome``), JUnit, the GitHub annotations and the job summary: the state, the sentence after
    it, and how many inputs could not be read (named in the sentence too).

    ``healthy`` only when the judgement found no anomaly *and* examined enough of the run;
    ``inconclusive`` when it could not examine enough; ``no verdict`` when there is no judgement at
    all (a summary without one, or a command that stopped before judging)."""

    state: str
    text: str
    unreadable_inputs: int = 0

    @property
    def label(self) -> str:
        return self.state.upper()

    @property
    def headline(self) -> str:
        return f"{self.label}: {self.text}"

    def as_dict(self) -> dict:
        return {"state": self.state, "headline": self.headline, "unreadable_inputs": self.unreadable_inputs}


def outcome(summary: dict) -> Outcome:
    """The state of a stored summary (see ``Outcome``)."""
    skipped = (summary.get("checkpoints") or {}).get("skipped") or []
    unreadable = sum(1 for x in skipped if not isinstance(x, dict) or x.get("error", True))
    raw = summary.get("verdict")
    if (
        not isinstance(raw, dict)
        or not isinstance(raw.get("anomalous"), bool)
        or not (raw["anomalous"] or raw.get("fault_type"))
    ):
        text = "the summary holds no verdict"
    else:
        v = verdict(summary)
        if v["anomalous"]:
            conf_s = _sure(v)
            if v.get("decision") == LOSS_DIVERGED:  # its 0 is no doubt that the run is anomalous
                conf_s = " (the loss diverged; no monitor named a cause)"
            state = ANOMALOUS
            text = (
                f"{v['fault_type']}{conf_s}, earliest anomalous step {_step(v['earliest_step'])}"
                + _first_examined(summary, v)
            )
        elif v["fault_type"] == INCONCLUSIVE:
            state, text = INCONCLUSIVE, str(v.get("reason") or "not enough evidence for a verdict")
        else:
            state, text = (
                HEALTHY,
                "no sustained anomaly in the monitors" + (_uncounted_headline(v) or _sure(v)),
            )
        return Outcome(state, text + _unmatched(summary) + _unreadable(unreadable), unreadable)
    return Outcome(NO_VERDICT, text + _unreadable(unreadable), unreadable)


def _unmatched(summary: dict) -> str:
    """What the headline adds for a verdict whose every series was read against a ``--baseline``
    run whose weights matched this run's at no common checkpoint (``reference_text``): ``-q``,
    JUnit and CI summaries print the headline alone, and such a reading was found to cry wolf; or
    for one whose ``--baseline`` run held none of its points (judged on its own history).
    (Since 2026-12-07 such a run is read for the step size alone, unless the detection parameters
    say otherwise; a summary written before says nothing of its scope.)"""
    d = detection(summary)
    if d.get("baseline") == REFERENCE_BASELINE and d.get("reference_scope") == REFERENCE_NONE:
        return "; the --baseline run could be read at none of its points: judged on its own history"
    if _matched_all(d):
        return "; the --baseline run's weights match this run's at every checkpoint"
    if not _matched_none(d) or d.get("reference_scope") == REFERENCE_STEPS:
        return ""
    return "; read against a --baseline run whose weights matched at no checkpoint"


def _matched_all(d: dict) -> bool:
    """A ``detection`` read against a reference run that holds every checkpoint of this run with
    the same weights (``reference_identical``): a copy of the run, or a run that repeated it bit
    for bit; nothing differs to read against it."""
    return d.get("baseline") == REFERENCE_BASELINE and d.get("reference_identical") is True


def _matched_none(d: dict) -> bool:
    """A ``detection`` read against a reference run whose weights matched this run's at no common
    checkpoint (``reference_shared_until`` recorded, and None)."""
    return (
        d.get("baseline") == REFERENCE_BASELINE
        and "reference_shared_until" in d
        and d["reference_shared_until"] is None
    )


def no_verdict(error: str) -> Outcome:
    """The state of a command that stopped before judging (its error line)."""
    return Outcome(NO_VERDICT, error)


def _uncounted_headline(v: dict) -> str:
    """What a healthy headline adds for a step-size jump that was not counted (``uncounted_jump``):
    ``--quiet`` prints the headline only, and such a jump is the one thing to check by hand; with
    the verdict's own (low) confidence, said to be the verdict's, not the jump's."""
    u = v.get("uncounted_jump")
    if not isinstance(u, dict) or u.get("step") is None:
        return ""
    conf = v.get("confidence")
    sure = f", so 'healthy' holds at confidence {conf:.2f} only" if isinstance(conf, (int, float)) else ""
    return f"; but a step-size jump at step {u['step']} was not counted{sure} (see the report)"


def _sure(v: dict) -> str:
    """A headline's confidence, anomalous or healthy: how often this decision path was right on the
    corpus runs the table was counted on (a healthy verdict is a claim too; ``--quiet`` prints the
    headline only); nothing where the summary holds none."""
    conf = v.get("confidence")
    return f" (confidence {conf:.2f})" if isinstance(conf, (int, float)) else ""


def _first_examined(summary: dict, v: dict) -> str:
    """What an anomalous headline adds where its earliest step is the first step examined: the
    fault may have begun before it, where nothing was scored."""
    first = as_int((coverage(summary) or {}).get("first_examined_step"))
    earliest = as_int(v.get("earliest_step"))
    if first is None or earliest is None or earliest != first or v.get("decision") == LOSS_DIVERGED:
        return ""
    return " (the first step examined: it may have begun earlier)"


def _unreadable(n: int) -> str:
    return "" if not n else f"; {n} input{'s' if n > 1 else ''} could not be read"


def _step(s) -> str:
    return "-" if s is None else str(s)


# --- summary accessors (tolerant of missing optional keys) ----------------------------------------


def detection(summary: dict) -> dict:
    """summary.json's ``detection`` object ({} where it is missing or not an object)."""
    d = summary.get("detection")
    return d if isinstance(d, dict) else {}


def coverage(summary: dict) -> dict | None:
    """``detection.coverage`` (None where it is missing or not an object: a result stored before
    coverage was kept, or a hand-edited one)."""
    cov = detection(summary).get("coverage")
    return cov if isinstance(cov, dict) else None


def examined_text(summary: dict) -> str | None:
    """Which part of the run the detectors examined (``detection.coverage``), in words: a verdict
    speaks for those steps only (None where the summary does not say)."""
    cov = coverage(summary)
    if cov is None or "first_examined_step" not in cov:
        return None
    first, settled = cov.get("first_examined_step"), cov.get("settled_step")
    when = f" (the run settled at step {settled})" if settled is not None else ""
    if first is None:
        return "nothing examined" + when
    unexamined = cov.get("layers_not_examined") or []
    gap = f"; layer(s) {unexamined} not examined (settled too late, or never)" if unexamined else ""
    return f"examined from step {first}{when}{gap}"


def reference_text(summary: dict) -> str | None:
    """Against which run the verdict was read, where a reference run was given (``--baseline``),
    and up to which common checkpoint the two runs' weights matched
    (``detection.reference_shared_until``): a reference that matched at none (another seed, other
    batches) is read for the step size alone (``detection.reference_scope``), and it says so; read
    for every series (the parameters' choice, or a summary from before 2026-12-07), the corpus found
    it to cry wolf, and it says that.  None for a run judged against its own history."""
    d = detection(summary)
    if d.get("baseline") != REFERENCE_BASELINE:
        return None
    run = d.get("reference_run") or "?"
    said = f"judged against the reference run {run} (--baseline)"
    if "reference_shared_until" not in d:  # a summary from before the field: nothing to say of it
        return said
    held = d.get("reference_steps_held")
    holds = (
        f"it holds {held[0]} of this run's {held[1]} checkpoints; "
        if isinstance(held, list) and len(held) == 2
        else ""
    )
    if d.get("reference_scope") == REFERENCE_NONE:
        return (
            f"{said}, which could be read at none of this run's points ({holds}a series is read against "
            "a reference only where it holds every checkpoint of it, an update ratio only where both runs "
            "saved last at the same step): every series was read against this run's own history"
        )
    if _matched_all(d):
        return (
            f"{said}; their weights match at every checkpoint of this run: nothing differs to read against "
            "it (a copy of this run, or a run that repeated it bit for bit)"
        )
    if not _matched_none(d):
        return (
            f"{said}, read for every series; their weights matched at every common checkpoint up to step "
            f"{d['reference_shared_until']}"
        )
    if d.get("reference_scope") == REFERENCE_STEPS:
        return (
            f"{said}, for the step size alone: their weights matched at none of their common "
            "checkpoints (a run of another seed or other batches, training that is not bit-reproducible, "
            "or a branch saved only after its fork), and two such runs' heads take their own courses, so "
            "every other series was read against this run's own history"
        )
    return (
        f"{said}, whose weights matched this run's at none of their common checkpoints: a run of another "
        "seed or other batches, training that is not bit-reproducible, or a branch saved only after its "
        "fork. Against a run of another seed this reading raised false alarms the run's own history did "
        'not (docs/detection.md, "Against a reference run"): read the verdict without --baseline too'
    )


def points_text(summary: dict) -> str:
    """Where the timeline's points came from: checkpoints read by ``ckptscan analyze``, or the
    in-loop monitor (``ckptscan.callbacks``; ``checkpoints.source`` in summary.json)."""
    ck = summary.get("checkpoints") or {}
    steps = ck.get("steps") or []
    span = f", steps {steps[0]}-{steps[-1]}" if steps else ""
    if ck.get("source") == "in-loop":
        every = f" every {ck['every']} optimizer steps" if ck.get("every") else ""
        return (
            f"{ck.get('analyzed', 0)} points computed in the training loop{every} (no checkpoint read{span})"
        )
    return f"{ck.get('analyzed', 0)} checkpoints analysed ({ck.get('reused', 0)} reused{span})"


def verdict(summary: dict) -> dict:
    v = dict(summary.get("verdict") or {})
    v.setdefault("anomalous", False)
    v.setdefault("earliest_step", None)
    v.setdefault("fault_type", "unknown" if v["anomalous"] else NO_VERDICT)
    v.setdefault("confidence", None)
    v["evidence"] = [e for e in (v.get("evidence") or []) if isinstance(e, dict)]
    return v


def uncounted_note(summary: dict) -> str | None:
    """The verdict's ``uncounted_jump`` as one sentence (None where there is none): a whole-model
    step-size jump that raised no alarm: not above the run's settled level in enough layers."""
    u = verdict(summary).get("uncounted_jump")
    return str(u.get("note")) if isinstance(u, dict) and u.get("note") else None


def set_aside_note(summary: dict) -> str | None:
    """On a verdict with alarms, the alarms the asleep rule set aside (``detection.coverage.
    dormant_alarms``) as one sentence; None where there were none, or where the verdict has no
    alarm (``healthy``, ``inconclusive``, ``unknown/loss-diverged``: its reason names them)."""
    v = verdict(summary)
    d = (coverage(summary) or {}).get("dormant_alarms")
    if not v.get("anomalous") or not v.get("evidence") or v.get("decision") == LOSS_DIVERGED:
        return None
    if not isinstance(d, dict) or not d.get("alarms"):
        return None
    monitors = d.get("monitors")
    on = f" ({', '.join(map(str, monitors))})" if isinstance(monitors, list) and monitors else ""
    return (
        f"{d['alarms']} alarm(s){on} on layer(s) {d.get('layers')} from step {d.get('first_step')}, where "
        f"the layer (or the alarm's head) stood under {d.get('dormant_ratio')} of the largest head's "
        f"||M|| at the alarm (read as not learning yet): not counted, while the alarms listed in the "
        f"evidence were; a fault that began there would be missed"
    )


def evidence_step(e: dict):
    return e.get("first_alarm_step", e.get("step"))


def evidence_step_text(summary: dict, e: dict) -> str:
    """An evidence item's step, marked where its excursion began at or after the loss's divergence
    step: after the divergence everything moves, so such an alarm says little about the cause."""
    step = evidence_step(e)
    if step is None:
        return "-"
    div, at = as_int((summary.get("loss") or {}).get("divergence_step")), as_int(step)
    return f"{step} (after divergence)" if div is not None and at is not None and at >= div else str(step)


def lead_text(summary: dict, unit: str = "") -> str:
    """The lead time over the loss, in words: the number of steps (``unit`` after it), ``-`` where
    there is none, and for a verdict dated at the divergence itself (``unknown/loss-diverged``: no
    monitor read the fault) not a bare lead of 0 but what it is."""
    lead = summary.get("lead_time_steps")
    if lead is None:
        return f"-{unit}"
    if verdict(summary).get("decision") == LOSS_DIVERGED:
        cov = coverage(summary)
        div = as_int((summary.get("loss") or {}).get("divergence_step"))
        if cov is not None and "first_examined_step" in cov and not examined_before(cov, div):
            return f"{lead}{unit} (dated at the divergence: nothing before it was examined)"
        return f"{lead}{unit} (dated at the divergence: the monitors did not read the fault before it)"
    return f"{lead}{unit}"


def log_only_text(summary: dict) -> str:
    """The log-only rule's first alarm, and how many it raised up to the divergence (or in all, where
    the loss did not diverge): an alarm in the warm-up that healthy runs raise too reads differently
    from a lone one just before the divergence.  summary.json lists at most ``MAX_LISTED_ALARMS``
    of them (``judge.logs``): "or more" there."""
    loss = summary.get("loss") or {}
    first = loss.get("log_only_alarm_step")
    if first is None:
        return "-"
    steps = loss.get("log_only_alarm_steps")
    div = as_int(loss.get("divergence_step"))
    listed = [as_int(x) for x in steps] if isinstance(steps, list) else []
    n = len([x for x in listed if x is not None and (div is None or x <= div)])
    if n <= 1:
        return str(first)
    more = " or more" if n >= MAX_LISTED_ALARMS else ""
    return f"{first} (first of {n}{more}{' up to the divergence' if div is not None else ''})"


_JUMP_SHAPE = {
    "straddle": "jump between two saves",
    "spike": "one-checkpoint spike",
    "straddle_spike": "spike between two saves",
}


def score_note(summary: dict) -> str:
    """What the evidence tables' score column holds (one unit for most rows; the others say theirs):
    a z against the series' own recent baseline, or, judged against a reference run
    (``--baseline``), against that run at the same step."""
    d = detection(summary)
    if d.get("baseline") == REFERENCE_BASELINE and d.get("reference_scope") == REFERENCE_STEPS:
        against = (
            "the reference run at the same step, its step-to-step spread, for the step sizes (q, k, "
            "router update ratios); the series' own recent baseline, median/MAD, for the others"
        )
    elif d.get("baseline") == REFERENCE_BASELINE:
        against = (
            "the reference run at the same step, its step-to-step spread (a series the reference "
            "lacks: its own recent baseline)"
        )
    else:
        against = "the series' own recent baseline, median/MAD"
    return (
        f"score: a robust z (standard deviations from {against}); x: a jump or rise factor, /: a "
        f"collapse's fall factor, -: a slow fall's entropy drop (the monitor says which)"
    )


def score_text(e: dict) -> str:
    """An evidence item's score with its unit where it is not a z: ``x1.75`` for a jump or rise
    factor, ``/29.5`` for a depth's fall factor (the head's D2 entropy fell to 1/29.5 of its
    settled level), ``-0.183`` for a slow fall's entropy drop; a z as the number alone."""
    x = e.get("score")
    if x is None:
        return "-"
    try:
        v = f"{float(x):.3g}"
    except (TypeError, ValueError):
        return str(x)
    marks = {
        "jump": f"x{v}",
        "rise": f"x{v}",
        "lift": f"x{v}",
        "depth": f"/{v}",
        "fall": f"-{v}",
        "early-fall": f"/{v}",
    }
    return marks.get(str(e.get("test")), v)


def evidence_monitor(e: dict) -> str:
    """The monitor an evidence item names; a step-size jump (``test`` "jump") says so, in which
    shape it was read, and that its score is the jump factor, not a z; a collapse read by its
    depth (``test`` "depth") that its score is the fall from the head's settled level; a slow rise
    (``test`` "rise") that its score is the rise factor, and a lift off a held level (``test``
    "lift") its lift factor; a slow fall across the model (``test``
    "fall") that its score is how far the layer's median D2 entropy fell (of 1; shape "high": from
    the highest it stood at from 1.5 times its settling step on; "peak": from the highest after the
    warm-up's peak); a fall before an
    unseen divergence (``test`` "early-fall") that its score is the fall factor."""
    m = str(e.get("monitor", ""))
    if e.get("test") == "depth":
        return f"{m} (depth: score = fall factor)"
    if e.get("test") == "rise":
        return f"{m} (slow rise: score = factor)"
    if e.get("test") == "lift":
        return f"{m} (lift off a held level: score = factor)"
    if e.get("test") == "fall":
        if e.get("shape") == "high":
            return f"{m} (slow fall from its settled high: score = entropy drop)"
        if e.get("shape") == "peak":
            return f"{m} (fall since the warm-up's peak: score = entropy drop)"
        return f"{m} (slow fall: score = entropy drop)"
    if e.get("test") == "early-fall":
        return f"{m} (fall before the divergence: score = fall factor)"
    if e.get("test") != "jump":
        return m
    return f"{m} ({_JUMP_SHAPE.get(str(e.get('shape')), 'jump')}: score = factor)"


def markers(summary: dict) -> dict[str, int | None]:
    """The steps every timeline marks: earliest anomaly, loss divergence, log-only alarm, and the
    first step the per-series tests scored (``detection.coverage``; the whole-model step-size
    rules read each layer from its own settling and can alarm before it)."""
    v = verdict(summary)
    loss = summary.get("loss") or {}
    first = (coverage(summary) or {}).get("first_examined_step")
    return {
        "earliest_step": v["earliest_step"],
        "divergence_step": loss.get("divergence_step"),
        "log_only_alarm_step": loss.get("log_only_alarm_step"),
        "first_examined_step": as_int(first),
    }


def layers_not_examined(summary: dict) -> set[int]:
    """The layers that never settled, so were never examined (``detection.coverage``)."""
    layers = (coverage(summary) or {}).get("layers_not_examined")
    if not isinstance(layers, list):
        return set()
    return {n for n in (as_int(x) for x in layers) if n is not None}


def leading_monitors(summary: dict, names, k: int = 4) -> list[str]:
    """The monitors to show first: those named by the evidence (in its order), then the primary
    monitors of the notes, then the ``leading`` series of other registered families, restricted to
    series the timeline has."""
    names = list(names)
    present = set(names)
    out: list[str] = []
    for e in verdict(summary)["evidence"]:
        m = e.get("monitor")
        if m in present and m not in out:
            out.append(m)
    from ckptscan.monitors import leading

    for d in (*DEFAULT_LEADING, *leading()):
        for n in names:
            if n not in out and series_names.same_monitor(n, d):
                out.append(n)
    return out[:k]


def alarm_steps(summary: dict, monitor: str) -> list[dict]:
    """First alarms of one monitor ({layer, head or None, step}), each dated for its own layer: the
    evidence items, then the entries of ``summary["alarms"]`` (per monitor) that give a layer's own
    first alarm step (``first_alarm_by_layer``, or a single layer with the entry's step).  An entry
    that names several layers with one monitor-wide step does not say when each of them alarmed, so
    those layers are left out rather than all dated to the earliest."""
    out: list[dict] = []

    def add(layer, head, st):
        if not isinstance(layer, int) or isinstance(layer, bool) or not isinstance(st, (int, float)):
            return
        if not any(o["layer"] == layer and o["step"] == int(st) and head in (o["head"], None) for o in out):
            out.append({"layer": layer, "head": head, "step": int(st)})

    for e in verdict(summary)["evidence"]:
        if e.get("monitor") == monitor:
            add(e.get("layer"), e.get("head"), evidence_step(e))
    alarms = summary.get("alarms")
    for a in alarms if isinstance(alarms, list) else []:
        if not isinstance(a, dict) or a.get("monitor") != monitor:
            continue
        by_layer = a.get("first_alarm_by_layer")
        if isinstance(by_layer, dict):
            for layer, st in by_layer.items():
                add(int(layer) if str(layer).isdigit() else None, None, st)
        elif a.get("layer") is not None:
            add(a.get("layer"), a.get("head"), evidence_step(a))
        elif isinstance(a.get("layers"), list) and len(a["layers"]) == 1:
            add(a["layers"][0], None, evidence_step(a))
    return out


def first_alarm_by_layer(summary: dict, monitor: str) -> dict[int, int]:
    """Layer -> the step of its first alarm on ``monitor`` (only layers whose own step is known)."""
    out: dict[int, int] = {}
    for a in alarm_steps(summary, monitor):
        out[a["layer"]] = min(out.get(a["layer"], a["step"]), a["step"])
    return out


# --- arrays -----------------------------------------------------------------------------------


def layer_matrix(arr: np.ndarray, direction: str) -> np.ndarray:
    """[N, L, K] -> [L, N]: one value per layer and step.  Heads are reduced to the most anomalous
    one in the monitor's direction (min for "down", max for "up"), so that a single bad head is not
    averaged away; "both" takes the mean."""
    a = np.asarray(arr, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if a.shape[2] == 1:
            m = a[:, :, 0]
        elif direction == "down":
            m = np.nanmin(a, axis=2)
        elif direction == "up":
            m = np.nanmax(a, axis=2)
        else:
            m = np.nanmean(a, axis=2)
    return m.T.copy()


def bins(n: int, max_cols: int) -> list[tuple[int, int]]:
    """Split range(n) into at most ``max_cols`` contiguous, near-equal bins (start, stop)."""
    if n <= 0:
        return []
    k = min(n, max(1, max_cols))
    edges = np.linspace(0, n, k + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(edges) if b > a]


def reduce_columns(mat: np.ndarray, steps: np.ndarray, max_cols: int, direction: str):
    """[R, N] -> (first step of each bin [C], [R, C]) with C <= max_cols.  Each bin keeps its
    extreme in the anomalous direction (mean for "both"), so short excursions stay visible."""
    mat = np.asarray(mat, dtype=np.float64)
    steps = np.asarray(steps)
    if mat.shape[1] <= max_cols:
        return steps.copy(), mat.copy()
    bs = bins(mat.shape[1], max_cols)
    red = {"down": np.nanmin, "up": np.nanmax}.get(direction, np.nanmean)
    out = np.full((mat.shape[0], len(bs)), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for j, (a, b) in enumerate(bs):
            out[:, j] = red(mat[:, a:b], axis=1)
    return np.array([steps[a] for a, _ in bs]), out


def downsample_xy(x, y, max_points: int):
    """Keep at most ~``max_points`` points of a series for an overview plot: per bin the minimum and
    the maximum (in step order), so spikes and dips survive; NaN bins stay NaN (gaps)."""
    x = np.asarray(x)
    y = np.asarray(y, dtype=np.float64)
    if len(x) <= max_points:
        return x, y
    xs, ys = [], []
    for a, b in bins(len(x), max(1, max_points // 2)):
        seg = y[a:b]
        fin = np.flatnonzero(np.isfinite(seg))
        if len(fin) == 0:
            xs.append(x[a])
            ys.append(np.nan)
            continue
        i_min = a + fin[np.argmin(seg[fin])]
        i_max = a + fin[np.argmax(seg[fin])]
        for i in sorted({i_min, i_max}):
            xs.append(x[i])
            ys.append(y[i])
    return np.asarray(xs), np.asarray(ys)


def detector_scores(summary: dict, timeline, name: str) -> np.ndarray | None:
    """[L, N]: the score the detector of a *rate* series gave each layer and checkpoint (the number
    its alarms were raised on; NaN where unscored), as the judgement stored it with the timeline
    (``/scores``), or None.  Nothing is recomputed: a result stored before the scores were kept
    shows the display deviation instead.

    Rate series (update ratios, ||D3||/||D2||, ||M||) trend in healthy training, so their distance
    from an early baseline says nothing; their detector scores the change against the run's own
    recent behaviour.  Level series (entropies) keep the display deviation from the early level,
    which stays visible after a collapse (the detector's rolling baseline re-bases after a window
    of refused values)."""
    from ckptscan.judge import detect

    det = detect.detector_for(timeline, name)
    if det is None or det.mode != "rate":
        return None
    stored = getattr(timeline, "scores", {}).get(name)
    return None if stored is None else np.asarray(stored, dtype=np.float64).T.copy()


def deviation(mat: np.ndarray, direction: str, baseline_frac: float = 0.2) -> np.ndarray:
    """[R, N] -> departure of each row from its early baseline, in robust units, counted only in the
    anomalous direction (absolute for "both"); 0 where undefined.

    The baseline is the row's first ``max(3, baseline_frac * N)`` finite values (median and MAD).
    This is a display scale for the terminal strip, not the detector's statistic.
    """
    mat = np.asarray(mat, dtype=np.float64)
    out = np.zeros_like(mat)
    for r in range(mat.shape[0]):
        row = mat[r]
        fin = row[np.isfinite(row)]
        if len(fin) < 2:
            continue
        base = fin[: max(3, int(baseline_frac * len(fin)))]
        med = float(np.median(base))
        mad = 1.4826 * float(np.median(np.abs(base - med)))
        scale = max(mad, 1e-3 * abs(med), 1e-12)
        d = (row - med) / scale
        if direction == "down":
            d = -d
        elif direction != "up":
            d = np.abs(d)
        out[r] = np.where(np.isfinite(d), np.maximum(d, 0.0), 0.0)
    return out


# --- the loss curve -----------------------------------------------------------------------------


@dataclass
class Curve:
    steps: np.ndarray
    loss: np.ndarray
    grad_norm: np.ndarray | None
    source: str


def loss_curve(summary: dict) -> Curve | None:
    """The training loss, if the summary carries points or the run's log can still be read.

    Looks at ``summary["loss"]["curve"]`` (``{"steps": [...], "loss": [...]}`` or ``[[step, loss],
    ...]``), then reads the log through ``ckptscan.judge.logs`` (the logged path, else the run folder).
    ``None`` when neither works: reports then simply have no loss plot.
    """
    loss = summary.get("loss") or {}
    pts = loss.get("curve")
    try:
        if isinstance(pts, dict) and "steps" in pts and "loss" in pts:
            g = pts.get("grad_norm")
            return Curve(
                np.asarray(pts["steps"]),
                _floats(pts["loss"]),
                None if g is None else _floats(g),
                "summary.json",
            )
        if isinstance(pts, list) and pts and all(isinstance(p, (list, tuple)) and len(p) >= 2 for p in pts):
            return Curve(np.asarray([p[0] for p in pts]), _floats([p[1] for p in pts]), None, "summary.json")
    except (TypeError, ValueError):
        pass
    from ckptscan.judge import logs

    log_path = None
    for holder in (summary.get("log"), loss.get("log")):  # top-level "log" is where detection puts it
        if isinstance(holder, dict) and holder.get("path"):
            log_path = holder["path"]
            break
    try:
        curve = logs.load_curve(summary.get("run", ""), log_path)
    except Exception:  # noqa: BLE001 -- a report must render even when the log is gone or unreadable
        return None
    if curve is None or len(curve) == 0:
        return None
    return Curve(curve.steps, curve.loss, curve.grad_norm, str(curve.path))


def _floats(v) -> np.ndarray:
    return np.asarray([np.nan if x is None else float(x) for x in v], dtype=np.float64)
