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


# a section named in another doc: '"Known limits" in [detection.md](detection.md)' (the quote may wrap)
SECTION_REF = re.compile(r'"([^"]{3,300})" in \[([\w.-]+\.md)\]\(\2\)')


def _headings(doc: Path) -> list[str]:
    lines = doc.read_text(encoding="utf-8").splitlines()
    return [" ".join(line.lstrip("#").split()) for line in lines if line.startswith("#")]


def test_sections_named_in_another_doc_exist_there():
    """docs/detection.md and docs/detection-history.md name each other's sections by their
    headings: each name must open a heading of the file it points to (a heading renamed or moved
    leaves the reference pointing nowhere)."""
    bad, seen, headings = [], 0, {}
    for doc in DOCS:
        for name, target in SECTION_REF.findall(doc.read_text(encoding="utf-8")):
            seen += 1
            name = " ".join(name.split())
            path = doc.parent / target
            if path not in headings:
                headings[path] = _headings(path)
            if not any(h.startswith(name) for h in headings[path]):
                bad.append(f"{doc.relative_to(ROOT)}: {name!r} not a heading of {target}")
    assert seen >= 50 and not bad, (seen, bad)


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
