"""Repository hygiene: the project stands alone (its code and docs cite only files inside it), and
measurements live in docs/, not in docstrings (where they go stale unseen)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted([*(ROOT / "ckptscan").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")])
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "benchmarks").rglob("*.md")])
# a notes folder beside the repository, which readers of this one do not have
OUTSIDE = re.compile(r"\bshared/|\bnotes/[\w-]+\.md|monitors\.md,? section")
MEASURED = re.compile(
    r"\d+(\.\d+)? ?(ms|µs|MB|GB|MiB/s|GB/s|GFLOP/s)\b|\d+(\.\d+)? ?%|\b\d+(\.\d+)? ?x (faster|cheaper|more|slower)"
)


def _docstrings(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield getattr(node, "name", path.name), doc


def test_code_and_docs_cite_nothing_outside_the_repository():
    bad = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in [*SOURCES, *DOCS]
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not bad, bad


def test_relative_links_in_the_docs_resolve():
    bad = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
            if "://" not in target and not (doc.parent / target).exists():
                bad.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert not bad, bad


def test_no_measurements_in_docstrings():
    """A measured time, size or speed-up in a docstring goes to docs/performance.md (or the doc of
    its topic), with the command that measured it; the docstring points there."""
    bad = [
        f"{p.relative_to(ROOT)}:{name}: {m.group()}"
        for p in SOURCES
        if p.is_relative_to(ROOT / "ckptscan")
        for name, doc in _docstrings(p)
        for m in [MEASURED.search(doc)]
        if m
    ]
    assert not bad, bad
