"""The report formats written to a file: each one entry, registered here.

A ``ReportFormat`` names its command-line option (``--<name> FILE`` on ``analyze`` and ``report``),
what it is (the "ckptscan: <what>: <path>" line on stderr, the option's help) and the function that
writes it.  ``cli.py`` derives its options from ``REPORT_FORMATS`` and ``report.emit`` writes every
one asked for.  This module stays light (``ckptscan --help`` never imports torch): a writer imports
its renderer when called.  The terminal report and the summary JSON (``--json``) go to stdout and
are not file formats.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ReportFormat:
    name: str  # the option is --<name> FILE; emit's keyword is <name>_file
    what: str  # "HTML report": the stderr line "ckptscan: HTML report: <path>"
    help: str  # the option's help, after "Also write" (analyze) / "Write" (report)
    # (result, path, baseline) -> the path written; ``baseline``: (label, Timeline) or None
    write: Callable[[Any, Path, Any], Path]
    # True: handed the result as stored (the format escapes control characters its own way);
    # False: names from the evidence already made printable (``errors.printable_tree``)
    raw: bool = False

    @property
    def keyword(self) -> str:
        return f"{self.name}_file"


REPORT_FORMATS: dict[str, ReportFormat] = {}


def register_report(fmt: ReportFormat) -> ReportFormat:
    if fmt.name in REPORT_FORMATS:
        raise ValueError(f"report format {fmt.name!r} is registered twice")
    REPORT_FORMATS[fmt.name] = fmt
    return fmt


def unregister_report(name: str) -> None:
    REPORT_FORMATS.pop(name, None)


def _html(result: Any, path: Path, baseline: Any) -> Path:
    from ckptscan.report.html import write_html

    return write_html(result, path, baseline)


def _junit(result: Any, path: Path, baseline: Any) -> Path:
    from ckptscan.report.ci import write_junit

    return write_junit(result, path)


register_report(ReportFormat("html", "HTML report", "a self-contained HTML report.", _html, raw=True))
register_report(ReportFormat("junit", "JUnit XML", "a JUnit XML file for CI systems.", _junit))
