"""``ckptscan eval RUNS_DIR``: score the detector against drill runs with known ground truth.

Every sub-folder of RUNS_DIR with a ``truth.json`` (written by the drills) is analysed like any
run; only this module reads ``truth.json``, never ``analyze``/``judge``.  A row per run says
whether the fault was found after its onset and before the loss diverged, whether the class is
right, the lead times of ckptscan and of the log-only detector, and whether either cried wolf.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import click

from ckptscan.cli import handle_errors
from ckptscan.config import AnalysisConfig
from ckptscan.errors import CkptscanError, UsageError
from ckptscan.judge.faults import from_drill_name


def truth_class(truth: dict) -> str:
    """The verdict class a drill's ``truth.json`` calls for (its ``fault`` as spelled in the drills)."""
    fault = str(truth.get("fault"))
    cls = from_drill_name(fault)
    return fault if cls is None else cls.value


def find_runs(runs_dir: Path) -> list[Path]:
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise UsageError(f"{runs_dir}: not a folder")
    if (runs_dir / "truth.json").is_file():
        return [runs_dir]
    return sorted(p for p in runs_dir.iterdir() if p.is_dir() and (p / "truth.json").is_file())


ONSET_PHASES = ("before the run settled", "settled, not yet examined", "examined", "not examined", "unknown")


def onset_phase(onset: int | None, coverage: dict) -> str:
    """Where a fault's onset fell in the run's own time line (``detection.coverage``): ``"before the
    run settled"`` (before ``settled_step``, the first layer's settling, where only the rules read
    on checkpoints can see a change: the jump rule from the third update ratio on, the early
    fall), ``"settled, not yet examined"`` (from there to ``first_examined_step``, the baseline the
    per-series tests measure from: a change there sits in the baseline), ``"examined"`` (at or
    after it), ``"not examined"`` (no layer settled, or the run settled and nothing was examined:
    the per-series tests read nothing), ``"unknown"`` (no onset, or a summary with no coverage)."""
    if onset is None or "settled_step" not in coverage or "first_examined_step" not in coverage:
        return "unknown"
    settled, first = coverage["settled_step"], coverage["first_examined_step"]
    if not isinstance(settled, int):
        return "not examined"
    if onset < settled:
        return "before the run settled"
    if not isinstance(first, int):
        return "not examined"
    return "settled, not yet examined" if onset < first else "examined"


def score_run(truth: dict, summary: dict) -> dict:
    """One row: the verdict in ``summary`` against ``truth``.

    The log-only detector is credited with its first alarm *at or after* the onset (an alarm
    before the onset cannot be a detection of the fault: it is counted as crying wolf, and a user
    who dismissed it would keep watching).  ``log_only_first_lead_time`` is the stricter reading
    that only credits the very first alarm of the run (``None`` if that alarm came before the
    onset); both are reported, ``beats_log_only`` uses the first (the harder bar for ckptscan).
    """
    tclass = truth_class(truth)
    faulty = tclass != "healthy"
    onset = truth.get("onset_step") if faulty else None
    div = truth.get("divergence_step")
    v = summary["verdict"]
    earliest = v.get("earliest_step")
    confirmed = v.get("confirmed_step")
    loss = summary.get("loss", {})
    first_log = loss.get("log_only_alarm_step")
    log_steps = loss.get("log_only_alarm_steps")
    if log_steps is None:  # older summary.json: only the first alarm is known
        log_steps = [first_log] if first_log is not None else []
    if faulty:
        false_alarm = bool(v["anomalous"]) and earliest is not None and onset is not None and earliest < onset
        detected = (
            bool(v["anomalous"]) and not false_alarm and (div is None or earliest is None or earliest < div)
        )
        log_wolf = any(s < onset for s in log_steps) if onset is not None else False
        after = [s for s in log_steps if onset is None or s >= onset]
        log_alarm = after[0] if after else None
        log_detected = log_alarm is not None and (div is None or log_alarm < div)
        first_ok = (
            first_log is not None
            and (onset is None or first_log >= onset)
            and (div is None or first_log < div)
        )
    else:
        false_alarm = bool(v["anomalous"])
        detected = None
        log_alarm = first_log
        log_wolf = bool(log_steps)
        log_detected = first_ok = None
    lead = (div - earliest) if (faulty and detected and div is not None and earliest is not None) else None
    log_lead = (div - log_alarm) if (faulty and log_detected and div is not None) else None
    log_first_lead = (div - first_log) if (faulty and first_ok and div is not None) else None
    diverged_fault = faulty and div is not None
    saved = (summary.get("checkpoints") or {}).get("steps")
    in_window = (
        sum(onset <= s and (div is None or s < div) for s in saved)
        if faulty and onset is not None and saved is not None
        else None
    )
    cov = (summary.get("detection") or {}).get("coverage") or {}
    first = cov.get("first_examined_step")
    if in_window is None or saved is None or "first_examined_step" not in cov:
        examined_in_window = None
    elif not isinstance(first, int):  # nothing examined
        examined_in_window = 0
    else:
        examined_in_window = sum(s >= first and onset <= s and (div is None or s < div) for s in saved)
    phase = onset_phase(onset, cov) if faulty else None
    return {
        "run": None,
        "truth": tclass,
        "benign": truth.get("benign"),
        "onset": onset,
        "divergence": div,
        "detected": detected,
        "false_alarm": false_alarm,
        "verdict": v["fault_type"],
        "class_right": (v["fault_type"] == tclass),
        "confidence": v.get("confidence"),
        "decision": v.get("decision"),
        "earliest_step": earliest,
        # checkpoints analysed at/after the onset and before the divergence: with none, no reading of
        # the checkpoints can detect the fault in time (None: not a fault run, or steps unknown)
        "checkpoints_in_window": in_window,
        # ... of them, those at/after the first checkpoint the per-series tests examined (the run's
        # settling and the baselines after it): with none, only the rules read on checkpoints could
        # find the fault in time (the jump rule from the third update ratio on, the depth, rise and
        # fall rules from the layers' settling on; None: not a fault run, or its steps or coverage
        # unknown)
        "examined_in_window": examined_in_window,
        # where the onset fell in the run's own time line (``onset_phase``; None: not a fault run)
        "onset_phase": phase,
        # a whole-model step-size jump the verdict reports but did not count (``uncounted_jump``)
        "uncounted_jump": (v.get("uncounted_jump") or {}).get("step"),
        # the checkpoint at which the persistence rule had seen enough to raise the alarm
        "confirmed_step": confirmed,
        "confirmed_before_divergence": (confirmed is not None and confirmed < div)
        if (diverged_fault and detected)
        else None,
        # an online reader of the checkpoints could have raised the alarm this long before the divergence
        "confirmed_lead_time": (div - confirmed)
        if (diverged_fault and detected and confirmed is not None and confirmed < div)
        else None,
        # ckptscan's lead minus the log-only rule's, a missed detection counting as no lead (0); the
        # rule read by its first alarm at/after the onset, and by its first alarm (a false alarm before
        # the onset is then no detection, as ckptscan's are)
        "lead_over_log_only": ((lead or 0) - (log_lead or 0)) if diverged_fault else None,
        "lead_over_log_only_first": ((lead or 0) - (log_first_lead or 0)) if diverged_fault else None,
        "after_onset": (earliest - onset)
        if (faulty and earliest is not None and onset is not None)
        else None,
        "lead_time": lead,
        "log_only_alarm": log_alarm,
        "log_only_lead_time": log_lead,
        "log_only_first_lead_time": log_first_lead,
        "log_only_cried_wolf": log_wolf,
        # only meaningful when the loss diverged (otherwise there is no lead time to compare)
        "beats_log_only": (lead is not None and (log_lead is None or lead > log_lead))
        if diverged_fault
        else None,
        "beats_log_only_first": (lead is not None and (log_first_lead is None or lead > log_first_lead))
        if diverged_fault
        else None,
    }


TWIN_TOLERANCE = 5  # steps: a log-only alarm this close to one of a healthy twin's is the same blip
# what decides which batch a step sees, and what model sees it (the drills: seed -> batch order)
_BATCH_ORDER = ("naming", "model", "seq_len", "batch_size")


def recipe_key(truth: dict) -> str:
    """Runs with equal keys see the same batches at the same steps with the same model: seed, steps,
    data fingerprint, model, batch shape (not the LR schedule, the storage or the fault)."""
    params = truth.get("params") or {}
    return json.dumps(
        {
            "seed": truth.get("seed"),
            "steps": truth.get("steps_planned"),
            "data": (truth.get("data") or {}).get("fingerprint"),
            "params": {k: params.get(k) for k in _BATCH_ORDER},
        },
        sort_keys=True,
    )


def is_fault_free(truth: dict) -> bool:
    """A healthy or benign-event drill: none of its alarms can be a fault detection."""
    return truth_class(truth) == "healthy"


def specific_log_alarm(row: dict, log_steps: list[int], twin_steps: list[list[int]]) -> dict:
    """Add the log-only detector's *specific* answer to a fault run's row: its first alarm at/after
    the onset that no fault-free twin (same seed, data, model and batch shape; healthy or benign) raises within
    ``TWIN_TOLERANCE`` steps.  An alarm the healthy twin raises too is a blip of the data order,
    not a sign of the fault.  ``None`` entries when the run has no twin in the evaluation."""
    row["log_only_twins"] = len(twin_steps)
    keys = ("log_only_specific_alarm", "log_only_specific_lead_time", "beats_log_only_specific")
    if row["truth"] == "healthy" or not twin_steps:
        row.update(dict.fromkeys(keys))
        return row
    onset, div = row["onset"], row["divergence"]
    blips = [t for tw in twin_steps for t in tw]
    spec = [
        s
        for s in log_steps
        if (onset is None or s >= onset) and not any(abs(s - t) <= TWIN_TOLERANCE for t in blips)
    ]
    alarm = spec[0] if spec else None
    lead = (div - alarm) if (alarm is not None and div is not None and alarm < div) else None
    row["log_only_specific_alarm"] = alarm
    row["log_only_specific_lead_time"] = lead
    row["beats_log_only_specific"] = (
        (row["lead_time"] is not None and (lead is None or row["lead_time"] > lead))
        if div is not None
        else None
    )
    return row


def rejudge(run: Path, out_dir: Path, params, reference=None) -> dict:
    """A stored result's summary with its judgement made again under detection ``params``
    (``detect.Params``) from the stored timeline: nothing is recomputed from the checkpoints.
    ``reference`` (``verdict.Reference``): judge against that healthy run, as ``--baseline`` does."""
    from ckptscan.api import load_result
    from ckptscan.judge.verdict import judge

    res = load_result(out_dir)
    found = res.summary.get("findings") or []
    log = res.summary.get("log") or {}
    return {
        **res.summary,
        **judge(
            run,
            res.timeline,
            found,
            log_file=log.get("path"),
            params=params,
            reference=reference,
            log_step_offset=log.get("step_offset") or 0,
        ),
    }


def evaluate(
    runs_dir,
    out_root=None,
    twins_dir=None,
    on_run=None,
    params=None,
    config=None,
    stored=False,
    reference_for=None,
    **options,
) -> list[dict]:
    """Analyse every drill run under ``runs_dir``; one row per run (see ``score_run``).

    Fault-free runs (healthy or benign) under ``runs_dir`` and ``twins_dir`` serve as twins for
    the log-only detector's specific lead (``specific_log_alarm``); their logs are read, not analysed.
    ``on_run(i, total, row, seconds)`` is called after each run (progress).  With ``params``
    (``detect.Params``), runs already analysed under ``out_root`` are judged again with them
    (``rejudge``) instead of with the defaults.  With ``stored``, nothing is analysed: every run is
    judged from its stored result under ``out_root`` (with ``params``, or the defaults), so a corpus
    whose weights were deleted to save disk (its logs and ``truth.json`` kept) can still be judged
    again; a run with no stored result is an error row.  ``config`` (``AnalysisConfig``), or its
    fields as ``options``, is how each run is analysed.  ``reference_for(run, truth)``, with
    ``stored``: the ``verdict.Reference`` each run is judged against (``--baseline``), or None to
    leave the run out (no row)."""
    from ckptscan.api import analyze
    from ckptscan.judge import logs
    from ckptscan.judge.detect import Params

    if reference_for is not None and not stored:
        raise ValueError("runs are judged against a reference from their stored results only (stored=True)")
    runs = find_runs(Path(runs_dir))
    root = Path(out_root) if out_root is not None else Path.cwd() / "ckptscan-out" / "eval"
    twins: dict[str, list[list[int]]] = {}
    for run in runs + (find_runs(Path(twins_dir)) if twins_dir is not None else []):
        truth = json.loads((run / "truth.json").read_text())
        if is_fault_free(truth):
            twins.setdefault(recipe_key(truth), []).append(logs.summarize(run)["log_only_alarm_steps"])
    rows = []
    for i, run in enumerate(runs):
        t0 = time.monotonic()
        truth = json.loads((run / "truth.json").read_text())
        try:
            reference = reference_for(run, truth) if reference_for is not None else None
            if reference_for is not None and reference is None:
                continue
            if stored:
                summary = rejudge(run, root / run.name, params if params is not None else Params(), reference)
            else:
                summary = analyze(run, config, out_dir=root / run.name, **options).summary
                if params is not None:
                    summary = rejudge(run, root / run.name, params)
        except CkptscanError as e:  # one run that cannot be analysed is a row, not the end of the evaluation
            rows.append(
                {
                    "run": run.name,
                    "truth": truth_class(truth),
                    "verdict": "error",
                    "error": str(e),
                    "class_right": False,
                    "false_alarm": False,
                    "detected": False if not is_fault_free(truth) else None,
                    "divergence": truth.get("divergence_step"),
                    "onset": truth.get("onset_step"),
                }
            )
        else:
            row = score_run(truth, summary)
            row["run"] = run.name
            steps = summary["loss"].get("log_only_alarm_steps") or []
            rows.append(specific_log_alarm(row, steps, twins.get(recipe_key(truth), [])))
        if on_run is not None:  # an error row too
            on_run(i, len(runs), rows[-1], time.monotonic() - t0)
    return rows


def totals(rows: list[dict]) -> dict:
    faulty = [r for r in rows if r["truth"] != "healthy"]
    clean = [r for r in rows if r["truth"] == "healthy"]
    return {
        "runs": len(rows),
        "faulty": len(faulty),
        "detected": sum(bool(r["detected"]) for r in faulty),
        # fault runs with a checkpoint between onset and divergence, and how many of them were detected
        "detectable": sum(bool(r.get("checkpoints_in_window")) for r in faulty),
        "detected_of_detectable": sum(
            bool(r["detected"]) and bool(r.get("checkpoints_in_window")) for r in faulty
        ),
        # ... those with a checkpoint in that window that the per-series tests examined, and how
        # many of them were detected
        "examined_in_window": sum(bool(r.get("examined_in_window")) for r in faulty),
        "detected_of_examined": sum(
            bool(r["detected"]) and bool(r.get("examined_in_window")) for r in faulty
        ),
        # fault rows whose window is unknown (an error row, no onset, no checkpoint steps): neither
        # counted as detectable nor as not
        "window_unknown": sum(r.get("checkpoints_in_window") is None for r in faulty),
        "class_right": sum(bool(r["class_right"]) for r in rows),
        "false_alarms": sum(bool(r["false_alarm"]) for r in rows),
        "beats_log_only": sum(bool(r.get("beats_log_only")) for r in faulty),
        "beats_log_only_first": sum(bool(r.get("beats_log_only_first")) for r in faulty),
        "beats_log_only_specific": sum(bool(r.get("beats_log_only_specific")) for r in faulty),
        "with_twin": sum(r.get("beats_log_only_specific") is not None for r in faulty),
        "confirmed_before_divergence": sum(bool(r.get("confirmed_before_divergence")) for r in faulty),
        "diverged": sum(r["divergence"] is not None for r in faulty),
        "log_only_cried_wolf": sum(bool(r.get("log_only_cried_wolf")) for r in rows),
        "healthy_runs": len(clean),
        "inconclusive": sum(r["verdict"] == "inconclusive" for r in rows),
        "errors": sum(r["verdict"] == "error" for r in rows),
        # per fault class: the median, over diverged fault runs, of ckptscan's lead minus the log-only
        # rule's (read by its first alarm at/after the onset, and by its first alarm)
        "median_lead_over_log_only": _medians(faulty, "lead_over_log_only"),
        "median_lead_over_log_only_first": _medians(faulty, "lead_over_log_only_first"),
    }


def _medians(rows: list[dict], key: str) -> dict:
    return {
        k: median([r[key] for r in rows if r["truth"] == k and r.get(key) is not None])
        for k in sorted({r["truth"] for r in rows})
    }


def median(xs: list) -> float | None:
    """The median of ``xs`` (None when empty)."""
    xs = sorted(xs)
    if not xs:
        return None
    m = len(xs) // 2
    return float(xs[m]) if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


COLUMNS = [
    ("run", "run"),
    ("truth", "truth"),
    ("onset", "onset"),
    ("divergence", "diverge"),
    ("detected", "detected"),
    ("false_alarm", "false alarm"),
    ("verdict", "verdict"),
    ("class_right", "class ok"),
    ("earliest_step", "earliest"),
    ("after_onset", "+onset"),
    ("confirmed_step", "confirmed"),
    ("lead_time", "lead"),
    ("log_only_alarm", "log alarm"),
    ("log_only_lead_time", "log lead"),
    ("log_only_first_lead_time", "log lead (1st)"),
    ("log_only_specific_lead_time", "log lead (specific)"),
    ("log_only_cried_wolf", "log wolf"),
]


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def format_table(rows: list[dict], width: int = 100) -> str:
    """Plain-text table (one line per run) followed by the totals, in at most ``width`` columns: the
    columns that do not fit go to further tables below, each starting with the run."""
    head = [h for _, h in COLUMNS]
    body = [[_cell(r.get(k)) for k, _ in COLUMNS] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    groups: list[list[int]] = [[0]]
    used = widths[0]
    for i in range(1, len(head)):
        if used + 2 + widths[i] > width and len(groups[-1]) > 1:
            groups.append([0])
            used = widths[0]
        groups[-1].append(i)
        used += 2 + widths[i]
    lines: list[str] = []
    for g in groups:
        if lines:
            lines.append("")
        lines.append("  ".join(head[i].ljust(widths[i]) for i in g).rstrip())
        lines.append("  ".join("-" * widths[i] for i in g))
        lines += ["  ".join(b[i].ljust(widths[i]) for i in g).rstrip() for b in body]
    t = totals(rows)
    lines.append("")
    lines += textwrap.wrap(
        f"faulty runs detected {t['detected']}/{t['faulty']}, class right {t['class_right']}/{t['runs']}, "
        f"false alarms {t['false_alarms']}/{t['runs']}, "
        f"lead > log-only {t['beats_log_only']}/{t['diverged']} diverged "
        f"(vs its first alarm only: {t['beats_log_only_first']}/{t['diverged']}; "
        f"vs its alarms a healthy twin does not raise: {t['beats_log_only_specific']}/{t['with_twin']} "
        f"with a twin), "
        f"alarm confirmed before divergence {t['confirmed_before_divergence']}/{t['diverged']}, "
        f"log-only cried wolf {t['log_only_cried_wolf']}/{t['runs']}",
        width,
    )
    return "\n".join(lines)


@click.command("eval")
@click.argument("runs_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "-o",
    "--out",
    "out_root",
    type=click.Path(path_type=Path),
    default=None,
    help="Output root; each run goes to OUT/<run> (default ./ckptscan-out/eval).",
)
@click.option(
    "--twins",
    "twins_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help=(
        "More fault-free drill runs; a fault run's log-only alarm that a twin (same seed, data, model) "
        "also raises is a data-order blip."
    ),
)
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="Where the maths runs.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the rows and totals as JSON.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@handle_errors
def eval_cmd(
    runs_dir: Path, out_root: Path | None, twins_dir: Path | None, device: str, as_json: bool, debug: bool
) -> None:
    """Analyse every drill run (folders with truth.json) under RUNS_DIR and score the verdicts."""
    if not find_runs(runs_dir):
        raise UsageError(f"{runs_dir}: no run folder with a truth.json")

    def progress(i, total, row, seconds):  # on stderr: stdout carries the table or the JSON
        click.echo(
            f"ckptscan eval: run {i + 1}/{total} {row['run']}: {row['verdict']} ({seconds:.1f}s)", err=True
        )

    rows = evaluate(
        runs_dir,
        out_root=out_root,
        twins_dir=twins_dir,
        config=AnalysisConfig(device=device),
        on_run=progress,
        debug=debug,
    )
    if as_json:
        click.echo(json.dumps({"rows": rows, "totals": totals(rows)}, indent=2))
    else:
        click.echo(format_table(rows))
