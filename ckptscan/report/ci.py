"""What CI systems read: JUnit XML, GitHub Actions annotations and the job summary.

Exit codes live in ``Result.exit_code`` (0 healthy, 1 anomaly, 3 input error, 5 inconclusive;
``--fail-on``).

Every output states the run's headline (``data.outcome``: anomalous, inconclusive, healthy or no
verdict) in the same words as the terminal and the HTML report.

* ``write_junit``: one suite per run (named after it, with the analysis time and when it started),
  one test case per monitor family present (attention, router, numerics, act_attention,
  act_router), one for the verdict and one for the inputs.  A family fails when the verdict's
  evidence (or a NaN/Inf finding, for numerics) names it; the verdict fails when the run is
  anomalous or inconclusive and errors without a verdict; the inputs case errors when a checkpoint
  could not be read.  Every CI system that reads JUnit then shows the evidence without anyone
  opening a log.
* ``github_annotations``: ``::error``/``::warning``/``::notice`` workflow commands.
* ``step_summary_markdown``: a Markdown summary, appended to the file ``$GITHUB_STEP_SUMMARY`` names.
* ``no_verdict_outputs``: the same files when a command stopped before judging.
"""

from __future__ import annotations

import os
import re
import sys
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

from ckptscan.report import data

MAX_ANNOTATIONS = 10  # GitHub shows at most 10 errors and 10 warnings per step


def _evidence_text(items: list[dict]) -> str:
    lines = []
    for e in items:
        where = f"layer {e.get('layer', '-')}" + ("" if e.get("head") is None else f" head {e.get('head')}")
        score = e.get("score")
        score_s = f", score {score:.3g}" if isinstance(score, (int, float)) else ""
        lines.append(
            f"{data.evidence_monitor(e)}: {where}, first alarm at step {data.evidence_step(e)}{score_s}"
        )
    return "\n".join(lines)


def verdict_message(summary: dict) -> str:
    """The headline in CI words (``<state>: <text>``; ``data.outcome``)."""
    o = data.outcome(summary)
    return f"{o.state}: {o.text}"


def _timing(summary: dict) -> str:
    """The loss divergence and the lead time over it, when there are any."""
    m = data.markers(summary)
    if m["divergence_step"] is None:
        return ""
    lead = summary.get("lead_time_steps")
    text = f"loss diverged at step {m['divergence_step']}"
    return text if lead is None else f"{text}, lead time {data.lead_text(summary, ' steps')}"


def run_id(run: str) -> str:
    """``<parent>.<run>`` of a run path, in characters JUnit readers take for a class name: two runs
    in one pipeline get different suites and test classes."""
    parts = [re.sub(r"[^A-Za-z0-9_-]+", "_", p) for p in Path(str(run)).parts[-2:] if p not in ("/", "")]
    return ".".join(parts) or "run"


def _suite(run: str, summary: dict) -> ET.Element:
    suite = ET.Element("testsuite", name=f"ckptscan {run}", hostname="ckptscan")
    started = summary.get("started_at")
    if isinstance(started, str) and len(started) >= 19:
        suite.set("timestamp", started[:19])  # the JUnit schema's form: no time zone (ckptscan writes UTC)
    return suite


def _wrap(suite: ET.Element, cases: list[ET.Element], elapsed: float) -> ET.ElementTree[ET.Element]:
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    suite.set("skipped", "0")
    suite.set("time", f"{elapsed:.3f}")
    root = ET.Element("testsuites", name="ckptscan")
    for k in ("tests", "failures", "errors", "time"):
        root.set(k, suite.get(k, ""))  # each set just above
    root.append(suite)
    ET.indent(root)
    return ET.ElementTree(root)


def junit_tree(result) -> ET.ElementTree[ET.Element]:
    s = result.summary
    v = data.verdict(s)
    o = data.outcome(s)
    run = str(s.get("run", result.run_dir))
    cls = f"ckptscan.{run_id(run)}"
    elapsed = float(s.get("elapsed_s") or 0)
    skipped = (s.get("checkpoints") or {}).get("skipped") or []
    suite = _suite(run, s)
    cases = []

    def case(name: str, classname: str, time: float = 0.0):
        c = ET.SubElement(suite, "testcase", name=name, classname=classname, time=f"{time:.3f}")
        cases.append(c)
        return c

    c = case("verdict", cls, elapsed)  # the judgement is what the whole analysis was for
    if o.state == data.NO_VERDICT:
        ET.SubElement(c, "error", message=verdict_message(s), type="no-verdict").text = verdict_message(s)
    elif o.state != data.HEALTHY:
        f = ET.SubElement(c, "failure", message=verdict_message(s), type=str(v["fault_type"]))
        f.text = "\n".join(x for x in (_timing(s), _evidence_text(v["evidence"]) or "no evidence items") if x)
    ET.SubElement(c, "system-out").text = verdict_message(s)

    names = list(s.get("monitors") or (result.timeline.names() if result.timeline is not None else []))
    fams = data.families(names)
    by_family: dict[str, list[dict]] = {}
    for e in v["evidence"]:
        by_family.setdefault(data.monitor_info(str(e.get("monitor", ""))).family, []).append(e)
    findings = s.get("findings") or []
    for fam, members in fams.items():
        c = case(fam, f"{cls}.monitors")
        ev = by_family.get(fam, [])
        if fam == "numerics" and findings:
            text = "\n".join(
                f"{f.get('kind')} at step {f.get('step')} layer {f.get('layer')}: {f.get('nonfinite')} "
                f"NaN/Inf values in {', '.join(map(str, f.get('tensors', [])))}"
                for f in findings
            )
            ET.SubElement(
                c, "failure", message=f"{len(findings)} NaN/Inf findings", type="nonfinite"
            ).text = text
        elif ev and v["anomalous"]:
            first = min(
                (data.evidence_step(e) for e in ev if data.evidence_step(e) is not None), default=None
            )
            ET.SubElement(
                c,
                "failure",
                message=f"{len(ev)} evidence items, first alarm at step {first}",
                type=str(v["fault_type"]),
            ).text = _evidence_text(ev)
        ET.SubElement(c, "system-out").text = "monitors: " + ", ".join(members)

    c = case("inputs", cls)
    errors = [x for x in skipped if x.get("error", True)]
    if errors:
        ET.SubElement(
            c, "error", message=f"{len(errors)} inputs could not be read", type="input-error"
        ).text = "\n".join(f"{x.get('path')}: {x.get('reason')}" for x in errors)
    ck = s.get("checkpoints") or {}
    ET.SubElement(
        c, "system-out"
    ).text = f"{ck.get('analyzed', 0)} checkpoints analysed, {len(skipped)} skipped; run {run}"
    return _wrap(suite, cases, elapsed)


def no_verdict_junit(message: str, run: str) -> ET.ElementTree[ET.Element]:
    """The JUnit file of a command that stopped before judging: its verdict case errors."""
    suite = _suite(run, {"started_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")})
    c = ET.SubElement(suite, "testcase", name="verdict", classname=f"ckptscan.{run_id(run)}", time="0.000")
    text = f"{data.NO_VERDICT}: {message}"
    ET.SubElement(c, "error", message=text, type="no-verdict").text = text
    return _wrap(suite, [c], 0.0)


def write_junit(result, path: str | Path) -> Path:
    return _write_tree(junit_tree(result), path)


def _write_tree(tree: ET.ElementTree[ET.Element], path: str | Path) -> Path:
    from ckptscan.store.timeline import atomic_write

    path = Path(path)
    text = ET.tostring(tree.getroot(), encoding="unicode", xml_declaration=False)
    atomic_write(path, '<?xml version="1.0" encoding="UTF-8"?>\n' + text + "\n")
    return path


# --- GitHub Actions -----------------------------------------------------------------------------


def _esc_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _esc_prop(s: str) -> str:
    return _esc_data(s).replace(":", "%3A").replace(",", "%2C")


def _command(kind: str, title: str, message: str) -> str:
    return f"::{kind} title={_esc_prop(title)}::{_esc_data(message)}"


def github_annotations(result) -> list[str]:
    """Workflow-command lines: the verdict (error when anomalous or without a verdict, warning when
    inconclusive, notice when healthy) and one per skipped input (error when unreadable, notice when
    expected), capped at ``MAX_ANNOTATIONS``."""
    s = result.summary
    v = data.verdict(s)
    o = data.outcome(s)
    detail = [_timing(s), _evidence_text(v["evidence"][:5])] if o.state == data.ANOMALOUS else []
    message = "\n".join([verdict_message(s), *(x for x in detail if x)])
    lines = [_command(ANNOTATION_KIND[o.state], f"ckptscan: {o.state}", message)]
    uncounted = data.uncounted_note(s)
    if uncounted:
        lines.append(_command("warning", "ckptscan: step-size jump not counted", uncounted))
    skipped = (s.get("checkpoints") or {}).get("skipped") or []
    for x in skipped[:MAX_ANNOTATIONS]:
        kind = "error" if x.get("error", True) else "notice"
        lines.append(_command(kind, "ckptscan: input skipped", f"{x.get('path')}: {x.get('reason')}"))
    if len(skipped) > MAX_ANNOTATIONS:
        lines.append(
            _command(
                "warning",
                "ckptscan: inputs skipped",
                f"{len(skipped) - MAX_ANNOTATIONS} more skipped inputs (see summary.json)",
            )
        )
    return lines


ANNOTATION_KIND = {
    data.ANOMALOUS: "error",
    data.INCONCLUSIVE: "warning",
    data.HEALTHY: "notice",
    data.NO_VERDICT: "error",
}


def step_summary_icon(o: data.Outcome) -> str:
    """The job summary's mark: a check only for a healthy run whose inputs could all be read."""
    if o.state == data.HEALTHY:
        return "⚠️" if o.unreadable_inputs else "✅"
    return {data.ANOMALOUS: "❌", data.INCONCLUSIVE: "⚠️", data.NO_VERDICT: "⛔"}[o.state]


def _md(x) -> str:
    return "-" if x is None else str(x).replace("|", "\\|").replace("\n", " ")


def step_summary_markdown(result) -> str:
    s = result.summary
    v = data.verdict(s)
    m = data.markers(s)
    ck = s.get("checkpoints") or {}
    skipped = ck.get("skipped") or []
    o = data.outcome(s)
    out = [
        f"## ckptscan: {step_summary_icon(o)} {o.state}",
        "",
        f"**{_md(verdict_message(s))}**",
        "",
        "| | |",
        "|---|---|",
        f"| run | `{_md(s.get('run'))}` |",
        f"| fault class | {_md(v['fault_type'])} |",
        f"| earliest anomalous step | {_md(v['earliest_step'])} |",
        f"| loss divergence step | {_md(m['divergence_step'])} |",
        f"| lead time over the loss (steps) | {_md(data.lead_text(s))} |",
        f"| log-only detector alarm step | {_md(m['log_only_alarm_step'])} |",
        f"| log-only detector lead time (steps) | {_md(s.get('log_only_lead_time_steps'))} |",
        f"| checkpoints analysed / skipped | {ck.get('analyzed', 0)} / {len(skipped)} |",
        "",
    ]
    uncounted = data.uncounted_note(s)
    if uncounted:
        out += [f"Not counted: {_md(uncounted)}", ""]
    if v["evidence"]:
        out += [
            "### Evidence",
            "",
            "| monitor | layer | head | first alarm step | score |",
            "|---|---|---|---|---|",
        ]
        for e in v["evidence"][:20]:
            sc = e.get("score")
            out.append(
                f"| {_md(data.evidence_monitor(e))} | {_md(e.get('layer'))} | {_md(e.get('head'))} | "
                f"{_md(data.evidence_step(e))} | {_md(f'{sc:.3g}' if isinstance(sc, (int, float)) else sc)} |"
            )
        out.append("")
    if skipped:
        out += ["### Skipped inputs", ""]
        out += [f"- `{_md(x.get('path'))}`: {_md(x.get('reason'))}" for x in skipped[:50]]
        if len(skipped) > 50:
            out.append(f"- ... and {len(skipped) - 50} more (see summary.json)")
        out.append("")
    return "\n".join(out) + "\n"


def emit_github(result, *, stream=None) -> None:
    """When running under GitHub Actions: print the annotations and append the job summary.

    Annotations go to ``stream`` (the CLI passes stderr when stdout carries JSON); the runner reads
    workflow commands from both.
    """
    if not os.environ.get("GITHUB_ACTIONS"):
        return
    for problem in _github(github_annotations(result), step_summary_markdown(result), stream or sys.stdout):
        print(f"ckptscan: warning: {problem}", file=sys.stderr)


def _github(annotations: list[str], markdown: str, stream) -> list[str]:
    for line in annotations:
        print(line, file=stream)
    stream.flush()
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return []
    try:
        with open(target, "a", encoding="utf-8") as f:
            f.write(markdown)
    except OSError as e:  # a CI nicety must not turn a finished analysis into a failure
        return [f"cannot write the job summary to {target}: {e.strerror}"]
    return []


def no_verdict_outputs(message: str, *, run: str, junit_file=None) -> list[str]:
    """A command stopped before judging (``message``: its error line): write the requested JUnit
    file and, under GitHub Actions, the annotation and job summary, all reading "no verdict".
    Returns the problems met on the way (the error itself is what the user must see first)."""
    problems = []
    if junit_file is not None:
        try:
            _write_tree(no_verdict_junit(message, run), junit_file)
        except OSError as e:
            problems.append(f"cannot write the JUnit file {junit_file}: {e.strerror or e}")
    if os.environ.get("GITHUB_ACTIONS"):
        o = data.no_verdict(message)
        line = f"{o.state}: {o.text}"
        md = "\n".join(
            [
                f"## ckptscan: {step_summary_icon(o)} {o.state}",
                "",
                f"**{_md(line)}**",
                "",
                "| | |",
                "|---|---|",
                f"| run | `{_md(run)}` |",
                "",
                "",
            ]
        )
        annotation = _command(ANNOTATION_KIND[o.state], f"ckptscan: {o.state}", line)
        problems += _github([annotation], md, sys.stderr)
    return problems
