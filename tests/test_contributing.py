"""CONTRIBUTING.md's recipes name files that exist, and each heading's count matches its list."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXT = (ROOT / "CONTRIBUTING.md").read_text()


def _recipes() -> dict[str, tuple[int, list[str]]]:
    out = {}
    for section in re.split(r"^## ", TEXT, flags=re.MULTILINE)[1:]:
        title = section.splitlines()[0]
        m = re.search(r"^Files to touch \((\d+)\):\n\n((?:- .*\n(?:  .*\n)*)+)", section, re.MULTILINE)
        assert m, f"{title}: no 'Files to touch (N):' list"
        files = re.findall(r"^- `([^`]+)`", m.group(2), re.MULTILINE)
        out[title] = (int(m.group(1)), files)
    return out


def test_every_recipe_count_is_its_list_and_every_file_exists():
    recipes = _recipes()
    assert set(recipes) == {
        "Add a monitor family",
        "Add a checkpoint format",
        "Add a fault class",
        "Add a report format",
    }
    for title, (count, files) in recipes.items():
        assert len(files) == count, (title, files)
        for f in files:
            if "<" in f:  # the new file: its folder exists
                assert (ROOT / f).parent.is_dir(), (title, f)
            else:
                assert (ROOT / f).is_file(), (title, f)


def test_the_toy_units_live_in_their_test_files_only():
    """The monitor-family, checkpoint-format and report-format recipes done from one file each:
    nothing in the package knows the toy family, format or report."""
    assert "toy" not in " ".join(p.read_text() for p in (ROOT / "ckptscan").rglob("*.py")).lower()
    assert "register_family(TOY)" in (ROOT / "tests" / "test_toy_family.py").read_text()
    assert "register_format(TOY)" in (ROOT / "tests" / "test_toy_format.py").read_text()
    assert "register_report(TOY)" in (ROOT / "tests" / "test_toy_report.py").read_text()


def test_the_builtin_formats_register_from_their_own_modules():
    """ "Add a checkpoint format": the reader module holds the one registration, and
    readers/__init__.py only imports it."""
    from ckptscan.readers.registry import FORMATS

    init = (ROOT / "ckptscan" / "readers" / "__init__.py").read_text()
    assert "register_format(" not in init
    for fmt in FORMATS:
        module = ROOT / "ckptscan" / "readers" / (fmt.open.__module__.rsplit(".", 1)[1] + ".py")
        assert "register_format(" in module.read_text(), fmt.name
        assert module.stem in init, (fmt.name, module.stem)


def test_the_cli_has_one_file_option_per_registered_report_format():
    """ "Add a report format": cli.py names no format; its options come from the registry."""
    from ckptscan.cli import analyze, report
    from ckptscan.report.formats import REPORT_FORMATS

    cli = (ROOT / "ckptscan" / "cli.py").read_text()
    assert '"--html"' not in cli and '"--junit"' not in cli
    for command in (analyze, report):
        options = {o for p in command.params for o in p.opts}
        assert {f"--{name}" for name in REPORT_FORMATS} <= options, command.name
