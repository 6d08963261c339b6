"""Reports: terminal (rich), JSON, HTML, and the files CI reads.  ``emit`` renders a Result.

Modules: ``formats`` (the registry of report files: ``--html``, ``--junit``, ...), ``data`` (what
to show, computed once), ``terminal``, ``html`` (+ ``template.html``,
``report.js``), ``ci`` (JUnit, GitHub Actions), ``schema`` (+ ``schema.json``, the summary's JSON
Schema).  docs/report.md describes the reports, docs/ci.md the CI integration.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click

from ckptscan.errors import printable_tree
from ckptscan.report.formats import REPORT_FORMATS


def emit(
    result,
    *,
    as_json: bool,
    quiet: bool,
    console,
    baseline=None,
    **files: Path | None,
) -> None:
    """Print the result (JSON or terminal report), write the requested files, and, under GitHub
    Actions, print annotations and append the job summary.  ``files``: ``<name>_file=path`` for
    each registered report format asked for (``formats.REPORT_FORMATS``; None: not asked).  Files
    are written before anything that could be interrupted by a closed pipe, and each is announced
    on stderr unless ``quiet``.  Names from the evidence reach the terminal, JUnit and the
    annotations with their control characters escaped (``errors.printable``); JSON and HTML escape
    them their own way.  ``baseline``: (label, Timeline) the HTML report draws beside this run."""
    from ckptscan.report.ci import emit_github

    raw, result = result, dataclasses.replace(result, summary=printable_tree(result.summary))

    unknown = set(files) - {fmt.keyword for fmt in REPORT_FORMATS.values()}
    if unknown:
        raise TypeError(f"emit: no report format for {', '.join(sorted(unknown))}")
    written = []
    for fmt in REPORT_FORMATS.values():
        path = files.get(fmt.keyword)
        if path is not None:
            written.append((fmt.what, fmt.write(raw if fmt.raw else result, path, baseline)))
    if as_json:
        click.echo(raw.to_json())
    else:
        from ckptscan.report.terminal import print_result

        print_result(result, console, quiet=quiet)
    if not quiet:
        for what, written_path in written:
            click.echo(f"ckptscan: {what}: {written_path}", err=True)
    emit_github(result, stream=sys.stderr if as_json else sys.stdout)
