"""Reports: terminal (rich), JSON, HTML, and the files CI reads.  ``emit`` renders a Result.

Modules: ``data`` (what to show, computed once), ``terminal``, ``html`` (+ ``template.html``,
``report.js``), ``ci`` (JUnit, GitHub Actions), ``schema`` (+ ``schema.json``, the summary's JSON
Schema).  docs/report.md describes the reports, docs/ci.md the CI integration.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click

from ckptscan.errors import printable_tree


def emit(
    result,
    *,
    as_json: bool,
    quiet: bool,
    html_file: Path | None,
    junit_file: Path | None,
    console,
    baseline=None,
) -> None:
    """Print the result (JSON or terminal report), write the requested files, and, under GitHub
    Actions, print annotations and append the job summary.  Files are written before anything that
    could be interrupted by a closed pipe, and each is announced on stderr unless ``quiet``.  Names
    from the evidence reach the terminal, JUnit and the annotations with their control characters
    escaped (``errors.printable``); JSON and HTML escape them their own way.  ``baseline``: (label,
    Timeline) the HTML report draws beside this run."""
    from ckptscan.report.ci import emit_github

    raw, result = result, dataclasses.replace(result, summary=printable_tree(result.summary))

    written = []
    if html_file is not None:
        from ckptscan.report.html import write_html

        written.append(("HTML report", write_html(raw, html_file, baseline)))
    if junit_file is not None:
        from ckptscan.report.ci import write_junit

        written.append(("JUnit XML", write_junit(result, junit_file)))
    if as_json:
        click.echo(raw.to_json())
    else:
        from ckptscan.report.terminal import print_result

        print_result(result, console, quiet=quiet)
    if not quiet:
        for what, path in written:
            click.echo(f"ckptscan: {what}: {path}", err=True)
    emit_github(result, stream=sys.stderr if as_json else sys.stdout)
