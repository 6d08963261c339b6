"""What CI systems read: JUnit XML, GitHub Actions annotations and the job summary.

Exit codes live in ``Result.exit_code`` (0 healthy, 1 anomaly, 3 input error, 5 inconclusive;
``--fail-on``).

* ``write_junit``: one test case per monitor family present (attention, router, numerics,
  act_attention, act_router), one for the verdict and one for the inputs.  A family fails when the
  verdict's evidence (or a NaN/Inf finding, for numerics) names it; the verdict fails when the run
  is anomalous or inconclusive; the inputs case errors when a checkpoint could not be read.  Every CI system that
  reads JUnit then shows the evidence without anyone opening a log.
* ``github_annotations``: ``::error``/``::warning``/``::notice`` workflow commands.
* ``github_step_summary``: a Markdown summary, appended to the file ``$GITHUB_STEP_SUMMARY`` names.
"""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from ckptscan.report import data

MAX_ANNOTATIONS = 10  # GitHub shows at most 10 errors and 10 warnings per step


def _evidence_text(items: list[dict]) -> str:
    lines = []
    for e in items:
        where = f"layer {e.get('layer', '-')}" + ("" if e.get("head") is None else f" head {e.get('head')}")
        score = e.get("score")
        score_s = f", score {score:.3g}" if isinstance(score, (int, float)) else ""
        lines.append(f"{e.get('monitor')}: {where}, first alarm at step {data.evidence_step(e)}{score_s}")
    return "\n".join(lines)


def verdict_message(summary: dict) -> str:
    v = data.verdict(summary)
    if v["fault_type"] == "inconclusive":
        return f"inconclusive: {v.get('reason') or 'not enough evidence for a verdict'}"
    if not v["anomalous"]:
        return "healthy: no sustained anomaly in the monitors"
    m = data.markers(summary)
    msg = f"anomalous: {v['fault_type']}, earliest anomalous step {v['earliest_step']}"
    if isinstance(v["confidence"], (int, float)):
        msg += f" (confidence {v['confidence']:.2f})"
    if m["divergence_step"] is not None:
        msg += f"; loss diverged at step {m['divergence_step']}"
        if summary.get("lead_time_steps") is not None:
            msg += f", lead time {summary['lead_time_steps']} steps"
    return msg


def junit_tree(result) -> ET.ElementTree:
    s = result.summary
    v = data.verdict(s)
    skipped = (s.get("checkpoints") or {}).get("skipped") or []
    suite = ET.Element("testsuite", name="ckptscan", hostname="ckptscan")
    cases = []

    def case(name: str, classname: str = "ckptscan"):
        c = ET.SubElement(suite, "testcase", name=name, classname=classname, time="0")
        cases.append(c)
        return c

    c = case("verdict")
    if v["anomalous"] or v["fault_type"] == "inconclusive":
        f = ET.SubElement(c, "failure", message=verdict_message(s), type=str(v["fault_type"]))
        f.text = _evidence_text(v["evidence"]) or "no evidence items"
    ET.SubElement(c, "system-out").text = verdict_message(s)

    names = list(s.get("monitors") or (result.timeline.names() if result.timeline is not None else []))
    fams = data.families(names)
    by_family: dict[str, list[dict]] = {}
    for e in v["evidence"]:
        by_family.setdefault(data.monitor_info(str(e.get("monitor", ""))).family, []).append(e)
    findings = s.get("findings") or []
    for fam, members in fams.items():
        c = case(fam, "ckptscan.monitors")
        ev = by_family.get(fam, [])
        if fam == "numerics" and findings:
            text = "\n".join(f"{f.get('kind')} at step {f.get('step')} layer {f.get('layer')}: {f.get('nonfinite')} "
                             f"NaN/Inf values in {', '.join(map(str, f.get('tensors', [])))}" for f in findings)
            ET.SubElement(c, "failure", message=f"{len(findings)} NaN/Inf findings", type="nonfinite").text = text
        elif ev and v["anomalous"]:
            first = min((data.evidence_step(e) for e in ev if data.evidence_step(e) is not None), default=None)
            ET.SubElement(c, "failure", message=f"{len(ev)} evidence items, first alarm at step {first}",
                          type=str(v["fault_type"])).text = _evidence_text(ev)
        ET.SubElement(c, "system-out").text = "monitors: " + ", ".join(members)

    c = case("inputs")
    errors = [x for x in skipped if x.get("error", True)]
    if errors:
        ET.SubElement(c, "error", message=f"{len(errors)} inputs could not be read", type="input-error").text = \
            "\n".join(f"{x.get('path')}: {x.get('reason')}" for x in errors)
    ck = s.get("checkpoints") or {}
    ET.SubElement(c, "system-out").text = (f"{ck.get('analyzed', 0)} checkpoints analysed, {len(skipped)} skipped; "
                                           f"run {s.get('run')}")

    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    suite.set("skipped", "0")
    suite.set("time", str(s.get("elapsed_s", 0) or 0))
    root = ET.Element("testsuites", name="ckptscan")
    for k in ("tests", "failures", "errors", "time"):
        root.set(k, suite.get(k))
    root.append(suite)
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(result, path: str | Path) -> Path:
    from ckptscan.timeline import atomic_write

    path = Path(path)
    text = ET.tostring(junit_tree(result).getroot(), encoding="unicode", xml_declaration=False)
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
    """Workflow-command lines: the verdict (error when anomalous, warning when inconclusive, notice
    when healthy) and one
    per skipped input (error when unreadable, notice when expected), capped at ``MAX_ANNOTATIONS``."""
    s = result.summary
    v = data.verdict(s)
    lines = []
    if v["anomalous"]:
        ev = _evidence_text(v["evidence"][:5])
        lines.append(_command("error", "ckptscan: anomalous training run",
                              verdict_message(s) + (f"\n{ev}" if ev else "")))
    elif v["fault_type"] == "inconclusive":
        lines.append(_command("warning", "ckptscan: inconclusive", verdict_message(s)))
    else:
        lines.append(_command("notice", "ckptscan: healthy", verdict_message(s)))
    skipped = (s.get("checkpoints") or {}).get("skipped") or []
    for x in skipped[:MAX_ANNOTATIONS]:
        kind = "error" if x.get("error", True) else "notice"
        lines.append(_command(kind, "ckptscan: input skipped", f"{x.get('path')}: {x.get('reason')}"))
    if len(skipped) > MAX_ANNOTATIONS:
        lines.append(_command("warning", "ckptscan: inputs skipped",
                              f"{len(skipped) - MAX_ANNOTATIONS} more skipped inputs (see summary.json)"))
    return lines


def _md(x) -> str:
    return "-" if x is None else str(x).replace("|", "\\|").replace("\n", " ")


def step_summary_markdown(result) -> str:
    s = result.summary
    v = data.verdict(s)
    m = data.markers(s)
    ck = s.get("checkpoints") or {}
    skipped = ck.get("skipped") or []
    head = "## ckptscan: " + ("❌ anomalous run" if v["anomalous"] else
                              "⚠️ inconclusive" if v["fault_type"] == "inconclusive" else "✅ healthy run")
    out = [head, "", f"**{_md(verdict_message(s))}**", "",
           "| | |", "|---|---|",
           f"| run | `{_md(s.get('run'))}` |",
           f"| fault class | {_md(v['fault_type'])} |",
           f"| earliest anomalous step | {_md(v['earliest_step'])} |",
           f"| loss divergence step | {_md(m['divergence_step'])} |",
           f"| lead time over the loss (steps) | {_md(s.get('lead_time_steps'))} |",
           f"| log-only detector alarm step | {_md(m['log_only_alarm_step'])} |",
           f"| log-only detector lead time (steps) | {_md(s.get('log_only_lead_time_steps'))} |",
           f"| checkpoints analysed / skipped | {ck.get('analyzed', 0)} / {len(skipped)} |", ""]
    if v["evidence"]:
        out += ["### Evidence", "", "| monitor | layer | head | first alarm step | score |", "|---|---|---|---|---|"]
        for e in v["evidence"][:20]:
            sc = e.get("score")
            out.append(f"| {_md(e.get('monitor'))} | {_md(e.get('layer'))} | {_md(e.get('head'))} | "
                       f"{_md(data.evidence_step(e))} | {_md(f'{sc:.3g}' if isinstance(sc, (int, float)) else sc)} |")
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
    stream = stream or sys.stdout
    for line in github_annotations(result):
        print(line, file=stream)
    stream.flush()
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        try:
            with open(target, "a", encoding="utf-8") as f:
                f.write(step_summary_markdown(result))
        except OSError as e:  # a CI nicety must not turn a finished analysis into a failure
            print(f"ckptscan: warning: cannot write the job summary to {target}: {e.strerror}", file=sys.stderr)
