"""The command line around the analysis: start-up cost, progress in CI logs, what stderr says about
skipped inputs, option checks, output folders and the CI files written when a command fails.
(The exit-code contract itself: tests/test_cli_contract.py.)"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

import ckptscan
from ckptscan import cli
from ckptscan.api import analyze
from ckptscan.cli import main
from ckptscan.discover.checkpoints import Checkpoint
from ckptscan.errors import InputError
from tests.runs import make_run

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("cli") / "run", n=3)


def test_help_and_version_do_not_import_torch():
    code = (
        "import sys\nfrom ckptscan.cli import main\n"
        "for args in (['--help'], ['--version'], ['analyze', '--help']):\n"
        "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
        "print('TORCH', 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "Usage: " in out and "TORCH False" in out


def test_python_dash_m_ckptscan_is_the_cli():
    def dash_m(*args):
        return subprocess.run(
            [sys.executable, "-m", "ckptscan", *args], capture_output=True, text=True, check=False
        )

    res = dash_m("--help")
    assert res.returncode == 0 and res.stdout.startswith("Usage: ckptscan "), res.stderr
    res = dash_m("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"ckptscan, version {ckptscan.__version__}"
    res = dash_m("report")
    assert res.returncode == 2 and res.stderr.startswith("ckptscan: error: Missing argument")


def test_one_version_source():
    """pyproject.toml reads the version from ``ckptscan.__version__``; it writes none of its own."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "ckptscan.__version__"}
    assert importlib.metadata.version("ckptscan") == ckptscan.__version__


def test_progress_lines_without_a_terminal(monkeypatch, capsys):
    """First and last checkpoint, every skipped one, and in between at most every 5 s, with an ETA."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    now = [0.0]
    with cli._progress(True, clock=lambda: now[0]) as update:
        for i, (t, status) in enumerate(
            [
                (1, "analysed"),
                (2, "analysed"),
                (4, "skipped"),
                (5, "reused"),
                (10, "analysed"),
                (11, "analysed"),
                (12, "analysed"),
            ]
        ):
            now[0] = t
            update(i, 7, Checkpoint(step=100 * (i + 1), path=None), status)
    lines = capsys.readouterr().err.splitlines()
    assert [ln.split(" (")[0] for ln in lines] == [
        "ckptscan: checkpoint 1/7",
        "ckptscan: checkpoint 3/7",
        "ckptscan: checkpoint 5/7",
        "ckptscan: checkpoint 7/7",
    ]
    assert lines[0] == "ckptscan: checkpoint 1/7 (step 100) analysed; 1.0s elapsed, ETA 6.0s"
    assert lines[1].startswith("ckptscan: checkpoint 3/7 (step 300) skipped;")
    assert lines[-1].endswith("12s elapsed, ETA 0.0s")
    with cli._progress(False) as update:
        assert update is None


def test_analyze_without_a_terminal_prints_progress_and_skips_on_stderr(tmp_path):
    bad = make_run(tmp_path / "bad", n=3)
    f = bad / "checkpoint-200" / "model.safetensors"
    f.write_bytes(f.read_bytes()[:60])
    r = CliRunner().invoke(main, ["analyze", str(bad), "-o", str(tmp_path / "o"), "-q"])
    err = r.stderr.splitlines()
    assert r.exit_code == 3 and r.stdout.startswith("INCONCLUSIVE: ")
    (skip,) = [ln for ln in err if ln.startswith("ckptscan: warning: skipped ")]
    assert skip.startswith(f"ckptscan: warning: skipped {bad / 'checkpoint-200'}: ") and "truncated" in skip
    assert not any(ln.startswith("ckptscan: checkpoint ") for ln in err)  # -q: no progress
    r = CliRunner().invoke(main, ["analyze", str(bad), "-o", str(tmp_path / "o"), "--json"])
    assert json.loads(r.stdout)["checkpoints"]["skipped"]  # stdout stays pure JSON
    assert any(ln.startswith("ckptscan: checkpoint 2/2 ") for ln in r.stderr.splitlines())
    assert "ckptscan: warning: skipped " in r.stderr


def test_log_option_must_exist_and_may_be_a_folder(run, tmp_path):
    r = CliRunner().invoke(
        main, ["analyze", str(run), "-o", str(tmp_path / "o"), "--log", str(tmp_path / "nolog")]
    )
    assert r.exit_code == 2 and "nolog" in r.stderr and len(r.stderr.splitlines()) == 1
    logs = tmp_path / "tb"
    logs.mkdir()
    r = CliRunner().invoke(main, ["analyze", str(run), "-o", str(tmp_path / "o"), "--log", str(logs), "-q"])
    assert r.exit_code == 5, r.output  # a folder (of TensorBoard event files) is accepted
    with pytest.raises(Exception, match="no such file"):
        analyze(run, out_dir=tmp_path / "o2", log_file=tmp_path / "nolog")


def test_debug_stops_at_a_checkpoint_discovery_turned_away(tmp_path):
    run = make_run(tmp_path / "run", n=3)
    for f in (run / "checkpoint-200").iterdir():
        f.unlink()  # a checkpoint folder without weights: discovery lists it as skipped
    res = analyze(run, out_dir=tmp_path / "o")
    assert [s.path for s in res.skipped] == [str(run / "checkpoint-200")]
    with pytest.raises(InputError, match="checkpoint-200"):
        analyze(run, out_dir=tmp_path / "o", debug=True)


def test_debug_shows_the_traceback_and_keeps_the_exit_code(tmp_path):
    """--debug adds the traceback; the exit code stays the input error's 3 (it was 1, the code of an
    anomaly, which a CI job would read as a fault found), and the one error line still ends stderr."""
    run = make_run(tmp_path / "run", n=3)
    (run / "checkpoint-200" / "model.safetensors").write_bytes(b"\x00" * 16)  # not a safetensors file
    plain = CliRunner().invoke(
        main, ["analyze", str(run), "-o", str(tmp_path / "o"), "-q", "--fail-on", "input-error"]
    )
    assert plain.exit_code == 3 and "Traceback" not in plain.stderr, plain.stderr
    r = CliRunner().invoke(main, ["analyze", str(run), "-o", str(tmp_path / "o2"), "-q", "--debug"])
    assert r.exit_code == 3, (r.exit_code, r.stderr)
    assert "Traceback (most recent call last)" in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ckptscan: error: ") and "checkpoint-200" in last, last


def test_default_output_folders_never_mix_runs_or_selections(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = make_run(tmp_path / "a" / "run", n=3)
    b = make_run(tmp_path / "b" / "run", n=3, seed=1)
    ra, rb = analyze(a), analyze(b)
    assert ra.out_dir == tmp_path / "ckptscan-out" / "run"
    assert rb.out_dir.parent == ra.out_dir.parent and rb.out_dir.name.startswith("run-")
    assert json.loads((ra.out_dir / "summary.json").read_text())["run"] == str(a)  # not overwritten by b
    assert analyze(a).out_dir == ra.out_dir and analyze(b).out_dir == rb.out_dir  # each finds its own again
    assert analyze(a, every=2).out_dir.name == "run.every-2"
    assert analyze(a, steps="200:").out_dir.name == "run.steps-200-"
    r = CliRunner().invoke(main, ["analyze", str(a), "-o", str(ra.out_dir), "--every", "2"])
    assert r.exit_code == 2 and "--every 2" in r.stderr and "all checkpoints" in r.stderr
    r = CliRunner().invoke(main, ["analyze", str(b), "-o", str(ra.out_dir)])
    assert r.exit_code == 2 and "another run" in r.stderr


def test_a_failed_command_still_writes_its_ci_outputs(tmp_path, monkeypatch):
    """No verdict: the JUnit file and the GitHub outputs say so instead of being missing (or stale)."""
    junit, md = tmp_path / "j.xml", tmp_path / "summary.md"
    junit.write_text("<testsuites/>")  # an earlier run's file must not survive as if it were this one's
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(md))
    empty = tmp_path / "empty"
    empty.mkdir()
    r = CliRunner().invoke(main, ["analyze", str(empty), "-o", str(tmp_path / "o"), "--junit", str(junit)])
    assert r.exit_code == 3
    error = next(ln for ln in r.stderr.splitlines() if ln.startswith("ckptscan: error: "))
    suite = ET.parse(junit).getroot().find("testsuite")
    (case,) = suite.findall("testcase")
    assert suite.get("errors") == "1" and suite.get("name") == f"ckptscan {empty}" and suite.get("timestamp")
    assert case.find("error").get("type") == "no-verdict"
    assert case.find("error").get("message") == "no verdict: " + error.removeprefix("ckptscan: ")
    assert md.read_text().startswith("## ckptscan: ⛔ no verdict\n")
    assert (
        "::error title=ckptscan%3A no verdict::no verdict: error: no checkpoints found" in r.stdout + r.stderr
    )


def test_eval_prints_a_progress_line_per_run(tmp_path):
    runs = tmp_path / "runs"
    for name in ("a", "b"):
        make_run(runs / name, n=3)
        (runs / name / "truth.json").write_text(
            json.dumps({"fault": "none", "onset_step": None, "divergence_step": None})
        )
    r = CliRunner().invoke(main, ["eval", str(runs), "-o", str(tmp_path / "out"), "--json"])
    assert r.exit_code == 0, r.output
    assert [ln.split(" (")[0] for ln in r.stderr.splitlines()] == [
        "ckptscan eval: run 1/2 a: inconclusive",
        "ckptscan eval: run 2/2 b: inconclusive",
    ]
    assert len(json.loads(r.stdout)["rows"]) == 2  # stdout stays the JSON


@pytest.mark.slow
def test_a_reader_closing_stdout_early_is_not_a_failure_of_the_analysis(tmp_path):
    """``ckptscan report OUT --junit F | head -1``: exit 141 (SIGPIPE's code), no 'internal error',
    and the JUnit file keeps the verdict (it is written before anything goes to stdout)."""
    from tests.test_report import make_result, store

    out = store(make_result(), tmp_path / "out")
    junit = tmp_path / "j.xml"
    p = subprocess.Popen(
        [sys.executable, "-m", "ckptscan.cli", "report", str(out), "--junit", str(junit)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()  # the reader is gone before the first line
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141 and "error" not in err, err
    assert ET.parse(junit).getroot().find("testsuite/testcase/failure").get("type") == "lowprec_attention"


def test_a_long_error_is_cut_at_a_word_and_marked():
    """``describe`` keeps an exception to one line; a message longer than ``DESCRIBE_CHARS`` is cut
    at the last word boundary before it and ends `` ...``, never mid-word (a reason cut inside a
    file name reads as a typo in it); a short one is kept whole."""
    from ckptscan.errors import DESCRIBE_CHARS, describe

    long = ValueError("looked for " + ", ".join(f"pattern{i}.safetensors" for i in range(40)))
    said = describe(long)
    assert said.startswith("ValueError: looked for pattern0.safetensors,") and said.endswith(" ...")
    kept = said.removeprefix("ValueError: ").removesuffix(" ...")
    assert len(kept) <= DESCRIBE_CHARS and str(long).startswith(kept) and str(long)[len(kept)] == " "
    assert describe(ValueError("short\n  one")) == "ValueError: short one"
    assert describe(ValueError("x" * 300)) == "ValueError: " + "x" * DESCRIBE_CHARS + " ..."
