"""A report format defined and registered in this file alone becomes an option of ``ckptscan
report`` and ``analyze`` and is written by ``report.emit`` like the built-in ones.  Nothing outside
this file knows about it (CONTRIBUTING.md, "Add a report format")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from ckptscan import analyze
from ckptscan.report import data, emit
from ckptscan.report.formats import REPORT_FORMATS, ReportFormat, register_report, unregister_report

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "drills" / "healthy-dense"


def write_toy(result, path: Path, baseline) -> Path:
    """One line: the headline outcome and the steps analysed, read from report/data.py."""
    path = Path(path)
    steps = result.summary["checkpoints"]["steps"]
    path.write_text(f"toy report: {data.outcome(result.summary)} over steps {steps[0]}..{steps[-1]}\n")
    return path


TOY = ReportFormat("toy", "toy report", "a one-line toy report.", write_toy)


@pytest.fixture
def toy_report():
    register_report(TOY)
    yield TOY
    unregister_report("toy")


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    out = tmp_path_factory.mktemp("toy-report") / "out"
    return analyze(FIXTURE, out_dir=out, device="cpu", steps="100:400", command=["test"]), out


def test_emit_writes_a_format_registered_here(toy_report, stored, tmp_path, capsys):
    result, _ = stored
    emit(result, as_json=True, quiet=False, console=Console(), toy_file=tmp_path / "t.txt")
    assert (tmp_path / "t.txt").read_text().startswith("toy report: ")
    assert "over steps 100..400" in (tmp_path / "t.txt").read_text()
    assert f"ckptscan: toy report: {tmp_path / 't.txt'}" in capsys.readouterr().err


def test_the_cli_option_comes_from_the_registry(stored, tmp_path):
    _, out = stored
    target = tmp_path / "cli.txt"
    code = (
        "import sys\nfrom tests.test_toy_report import TOY\nfrom ckptscan.report.formats import register_report\n"
        "register_report(TOY)\nfrom ckptscan.cli import main\nmain(sys.argv[1:])"
    )
    args = [sys.executable, "-c", code, "report", str(out), "--toy", str(target), "-q"]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert target.read_text().startswith("toy report: ")
    helptext = subprocess.run(
        [*args[:3], "analyze", "--help"], capture_output=True, text=True, cwd=ROOT
    ).stdout
    assert "--toy FILE" in helptext and "Also write a one-line toy report." in helptext
    # without the registration there is no such option
    plain = subprocess.run(
        [sys.executable, "-m", "ckptscan", "report", str(out), "--toy", str(target)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert plain.returncode == 2 and "No such option '--toy'" in plain.stderr


def test_emit_refuses_a_format_nobody_registered(stored):
    result, _ = stored
    assert "toy" not in REPORT_FORMATS
    with pytest.raises(TypeError, match="no report format for toy_file"):
        emit(result, as_json=True, quiet=True, console=Console(), toy_file=Path("x"))
