"""What the corpus margin scripts (``*_margin.py``) share: the command line that names the analysis
roots they read (each with the ``eval.json`` rows ``score.py`` writes beside its runs), and the
reading of a whole-model rule's levels at the layer count it needs."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser with ``--ana`` (analysis roots) and ``--eval`` (the rows file in each root); a
    script adds its own options."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ana", type=Path, nargs="+", required=True, help="analysis roots (with eval.json)")
    ap.add_argument("--eval", default="eval.json", help="the rows file in each root")
    return ap


def largest_at_need(
    levels: np.ndarray, need, steps, divergence: int | None, since: int | None = None
) -> tuple[float, int | None]:
    """The largest reading of a whole-model rule (``levels`` [N, L], per checkpoint and layer, NaN:
    unread; the rule fires where ``need`` layers reach its bar: one count, or one per checkpoint) at
    its ``need``-th largest layer,
    from step ``since`` on, where the ``Params.persist`` checkpoints the reading covers all lie
    before the ``divergence`` step; and the step it was read at ((-inf, None): none read)."""
    from ckptscan.judge import detect

    steps = np.asarray(steps)
    end = len(steps) if divergence is None else int(np.searchsorted(steps, divergence))
    end -= detect.Params().persist - 1  # a reading at i covers i .. i + persist - 1: all before it
    begin = 0 if since is None else int(np.searchsorted(steps, since))
    needs = np.broadcast_to(np.asarray(need), (len(levels),))[begin:end]
    if end <= begin or not needs.any():
        return -np.inf, None
    read = np.where(np.isnan(levels[begin:end]), -np.inf, levels[begin:end])
    ranked = np.sort(read, axis=1)[:, ::-1]
    # the need-th largest layer reading (none where nothing is needed: no layer read there)
    at_need = np.where(needs > 0, ranked[np.arange(len(ranked)), np.maximum(needs, 1) - 1], -np.inf)
    i = int(np.argmax(at_need))
    return float(at_need[i]), (int(steps[begin + i]) if np.isfinite(at_need[i]) else None)
