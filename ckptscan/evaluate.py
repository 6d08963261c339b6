"""``ckptscan eval RUNS_DIR``: score the detector against drill runs with known ground truth.

Every sub-folder of RUNS_DIR with a ``truth.json`` (written by the drills) is analysed like any
run; only this module reads ``truth.json``, never ``analyze``/``judge``.  A row per run says
whether the fault was found after its onset and before the loss diverged, whether the class is
right, the lead times of ckptscan and of the log-only detector, and whether either cried wolf.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ckptscan.errors import UsageError

TRUTH_CLASS = {"lowprec-attention": "lowprec_attention", "high-lr": "high_lr", "combined": "combined",
               "none": "healthy", "benign": "healthy", "overflow": "overflow"}


def truth_class(truth: dict) -> str:
    return TRUTH_CLASS.get(str(truth.get("fault")), str(truth.get("fault")))


def find_runs(runs_dir: Path) -> list[Path]:
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise UsageError(f"{runs_dir}: not a folder")
    if (runs_dir / "truth.json").is_file():
        return [runs_dir]
    return sorted(p for p in runs_dir.iterdir() if p.is_dir() and (p / "truth.json").is_file())


def score_run(truth: dict, summary: dict) -> dict:
    """One row: the verdict in ``summary`` against ``truth``."""
    tclass = truth_class(truth)
    faulty = tclass != "healthy"
    onset = truth.get("onset_step") if faulty else None
    div = truth.get("divergence_step")
    v = summary["verdict"]
    earliest = v.get("earliest_step")
    loss = summary.get("loss", {})
    log_alarm = loss.get("log_only_alarm_step")
    if faulty:
        false_alarm = bool(v["anomalous"]) and earliest is not None and onset is not None and earliest < onset
        detected = bool(v["anomalous"]) and not false_alarm and (div is None or earliest is None or earliest < div)
        log_wolf = log_alarm is not None and onset is not None and log_alarm < onset
        log_detected = log_alarm is not None and not log_wolf and (div is None or log_alarm < div)
    else:
        false_alarm = bool(v["anomalous"])
        detected = None
        log_wolf = log_alarm is not None
        log_detected = None
    lead = (div - earliest) if (faulty and detected and div is not None and earliest is not None) else None
    log_lead = (div - log_alarm) if (faulty and log_detected and div is not None) else None
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
        "earliest_step": earliest,
        "after_onset": (earliest - onset) if (faulty and earliest is not None and onset is not None) else None,
        "lead_time": lead,
        "log_only_alarm": log_alarm,
        "log_only_lead_time": log_lead,
        "log_only_cried_wolf": log_wolf,
        # only meaningful when the loss diverged (otherwise there is no lead time to compare)
        "beats_log_only": (lead is not None and (log_lead is None or lead > log_lead)) if (faulty and div is not None) else None,
    }


def evaluate(runs_dir, out_root=None, **analyze_kwargs) -> list[dict]:
    """Analyse every drill run under ``runs_dir``; one row per run (see ``score_run``)."""
    from ckptscan.api import analyze

    runs = find_runs(Path(runs_dir))
    root = Path(out_root) if out_root is not None else Path.cwd() / "ckptscan-out" / "eval"
    rows = []
    for run in runs:
        truth = json.loads((run / "truth.json").read_text())
        res = analyze(run, out_dir=root / run.name, **analyze_kwargs)
        row = score_run(truth, res.summary)
        row["run"] = run.name
        rows.append(row)
    return rows


def totals(rows: list[dict]) -> dict:
    faulty = [r for r in rows if r["truth"] != "healthy"]
    clean = [r for r in rows if r["truth"] == "healthy"]
    return {
        "runs": len(rows),
        "faulty": len(faulty),
        "detected": sum(bool(r["detected"]) for r in faulty),
        "class_right": sum(bool(r["class_right"]) for r in rows),
        "false_alarms": sum(bool(r["false_alarm"]) for r in rows),
        "beats_log_only": sum(bool(r["beats_log_only"]) for r in faulty),
        "diverged": sum(r["divergence"] is not None for r in faulty),
        "log_only_cried_wolf": sum(bool(r["log_only_cried_wolf"]) for r in rows),
        "healthy_runs": len(clean),
    }


COLUMNS = [("run", "run"), ("truth", "truth"), ("onset", "onset"), ("divergence", "diverge"),
           ("detected", "detected"), ("false_alarm", "false alarm"), ("verdict", "verdict"),
           ("class_right", "class ok"), ("earliest_step", "earliest"), ("after_onset", "+onset"),
           ("lead_time", "lead"), ("log_only_alarm", "log alarm"), ("log_only_lead_time", "log lead"),
           ("log_only_cried_wolf", "log wolf")]


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def format_table(rows: list[dict]) -> str:
    """Plain-text table (one line per run) followed by the totals."""
    head = [h for _, h in COLUMNS]
    body = [[_cell(r.get(k)) for k, _ in COLUMNS] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths)) for b in body]
    t = totals(rows)
    lines.append("")
    lines.append(f"faulty runs detected {t['detected']}/{t['faulty']}, class right {t['class_right']}/{t['runs']}, "
                 f"false alarms {t['false_alarms']}/{t['runs']}, lead > log-only {t['beats_log_only']}/{t['diverged']} diverged, "
                 f"log-only cried wolf {t['log_only_cried_wolf']}/{t['runs']}")
    return "\n".join(lines)


@click.command("eval")
@click.argument("runs_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("-o", "--out", "out_root", type=click.Path(path_type=Path), default=None,
              help="Output root; each run goes to OUT/<run> (default ./ckptscan-out/eval).")
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows and totals as JSON.")
def eval_cmd(runs_dir: Path, out_root: Path | None, device: str, as_json: bool) -> None:
    """Analyse every drill run (folders with truth.json) under RUNS_DIR and score the verdicts."""
    rows = evaluate(runs_dir, out_root=out_root, device=device)
    if not rows:
        raise UsageError(f"{runs_dir}: no run folder with a truth.json")
    if as_json:
        click.echo(json.dumps({"rows": rows, "totals": totals(rows)}, indent=2))
    else:
        click.echo(format_table(rows))
