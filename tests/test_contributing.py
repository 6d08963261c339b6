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


def test_the_toy_family_lives_in_its_test_file_only():
    """The monitor-family recipe done from one file: nothing in the package knows the toy family."""
    assert "toy" not in " ".join(p.read_text() for p in (ROOT / "ckptscan").rglob("*.py")).lower()
    assert "register_family(TOY)" in (ROOT / "tests" / "test_toy_family.py").read_text()
