"""Reports: terminal (rich), JSON, and the files CI reads.  ``emit`` renders a Result."""

from __future__ import annotations

from pathlib import Path

import click


def emit(result, *, as_json: bool, quiet: bool, html_file: Path | None, junit_file: Path | None, console) -> None:
    from ckptscan.report.terminal import print_result

    if as_json:
        click.echo(result.to_json())
    else:
        print_result(result, console, quiet=quiet)
    if html_file is not None:
        from ckptscan.report.html import write_html

        write_html(result, html_file)
    if junit_file is not None:
        from ckptscan.report.ci import write_junit

        write_junit(result, junit_file)
