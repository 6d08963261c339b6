"""What the corpus margin scripts (``*_margin.py``) share: the command line that names the analysis
roots they read (each with the ``eval.json`` rows ``score.py`` writes beside its runs)."""

from __future__ import annotations

import argparse
from pathlib import Path


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser with ``--ana`` (analysis roots) and ``--eval`` (the rows file in each root); a
    script adds its own options."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ana", type=Path, nargs="+", required=True, help="analysis roots (with eval.json)")
    ap.add_argument("--eval", default="eval.json", help="the rows file in each root")
    return ap
