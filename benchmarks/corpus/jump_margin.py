"""The margins two readings of the step-size jump rule sit in, per run.

    python benchmarks/corpus/jump_margin.py --ana /work/corpus-ana/holdout20 /work/corpus-ana/holdout21

``--reading spike`` (the default): the spike shape (``detect.jump_score(..., "spike")``) read
without its condition on the next checkpoint, with every other condition of ``detect.jump_alarms``
(the attention step size and the output projections' both over the level, above the settled
high, x``jump_rising`` where the layer has not settled and stands at its running high, evenly
spaced saves, ``_layers_needed`` of the layers read). Prints the largest spike factor (the one the
needed layers reach) in healthy or benign runs and before the onset of fault runs, and, for the
fault runs whose spike reaches ``Params.jump_spike`` at or after their onset, how far their next
checkpoint stood over the level: how many reach x1.2 (the rules before ``holdout23``) and x1.0.

``--reading blocks``: the jump rule read on the scored blocks (``detect.coarsen``), as
``run_detection`` reads it with ``Params.jump_blocks``: per true class, the runs with such a jump,
and how many of them are healthy or benign, or dated before their onset.

For every analysed run with an ``eval.json`` row beside it (``score.py`` writes both); default
``Params``; reads only the stored timelines.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.corpus import margin_cli  # noqa: E402 -- after the repository root is on sys.path


def spikes(timeline) -> list[tuple[int, float, float]]:
    """(step, spike factor, next-checkpoint factor) at each checkpoint where the needed layers pass
    every condition of the spike shape but the next checkpoint's; each factor is the one the needed
    layers reach (the ``_layers_needed``-th largest), the next checkpoint's among the layers that
    spiked x``jump_spike`` (NaN: fewer than needed did)."""
    from ckptscan.judge import detect

    p = detect.Params()
    g, go = detect._model_steps(timeline)
    starts = detect.layer_starts(timeline, p)
    steps = np.asarray(timeline.steps)
    n = len(steps)
    if n < 4:
        return []
    i = np.arange(2, n - 1)
    own = starts if p.level_settled else None
    with np.errstate(invalid="ignore"):
        fall = p.fall_across_settling
        floor = detect.fall_floor(p)  # as jump_alarms reads a fall
        flat = detect.fall_flat(p)
        lv = detect._level_before(g, i, own, fall, floor, flat)
        lvo = detect._level_before(go, i, own, fall, floor, flat)
        qk = g[i] - lv
        up = np.minimum(qk, go[i] - lvo)
        stay = np.minimum(g[i + 1] - lv, go[i + 1] - lvo)
        high = detect.above_settled(g, starts, "spike")
        high_o = detect.above_settled(go, starts, "spike")
    at_high = detect.rising(g, p.warmup_skip)
    even = detect._evenly_saved(steps, 1)
    out = []
    for r, ii in enumerate(i):
        read = np.isfinite(up[r]) & np.isfinite(stay[r])
        if not read.any() or not even[ii]:
            continue
        with np.errstate(invalid="ignore"):
            ok = read & (high[ii] > 0) & (high_o[ii] > 0)
            early = np.isposinf(high[ii]) & at_high[ii]  # before settling, at the running high
            ok &= ~early | (up[r] > np.log(max(p.jump_spike, p.jump_rising)))
            ok &= qk[r] > 0
        need = detect._layers_needed(int(read.sum()))
        if ok.sum() < need:
            continue
        factor = float(np.exp(np.sort(up[r][ok])[::-1][need - 1]))
        spiked = ok & (up[r] >= np.log(p.jump_spike))  # the next checkpoint, where the needed layers spiked
        nxt = float(np.exp(np.sort(stay[r][spiked])[::-1][need - 1])) if spiked.sum() >= need else np.nan
        out.append((int(steps[ii]), factor, nxt))
    return out


def block_jump(timeline) -> int | None:
    """The step of the jump the jump rule reads on the scored blocks (None: none, or no blocks)."""
    from ckptscan.judge import detect

    p = detect.Params()
    starts, _ = detect.examined_from(timeline, p)
    k = detect.block_size(timeline, starts, p)
    if k <= 1:
        return None
    coarse, _ = detect.coarsen(timeline, k)
    alarms = detect.jump_alarms(coarse, p, None, detect.DETECTORS, -(-starts // k))
    return alarms[0].first_step if alarms else None


def main(argv=None) -> int:
    ap = margin_cli.parser(__doc__)
    ap.add_argument("--reading", choices=("spike", "blocks"), default="spike")
    args = ap.parse_args(argv)
    from ckptscan.api import load_result
    from ckptscan.judge.detect import Params

    warnings.simplefilter("ignore", RuntimeWarning)
    clean_top: tuple[float, str, int] | None = None
    stays: list[tuple[float, str]] = []
    blocks: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # truth -> [runs with one, early]
    for root in args.ana:
        for row in json.loads((root / args.eval).read_text())["rows"]:
            if row["verdict"] == "error":  # nothing stored to read
                continue
            timeline = load_result(root / row["run"]).timeline
            onset = row["onset"] if row["truth"] != "healthy" else None
            if args.reading == "blocks":
                step = block_jump(timeline)
                if step is not None:
                    blocks[row["truth"]][0] += 1
                    blocks[row["truth"]][1] += onset is None or step < onset
                continue
            for step, factor, nxt in spikes(timeline):
                if onset is None or step < onset:
                    if clean_top is None or factor > clean_top[0]:
                        clean_top = (factor, row["run"], step)
                elif factor >= Params().jump_spike:
                    stays.append((nxt, row["run"]))
                    break
    if args.reading == "blocks":
        for truth in sorted(blocks):
            n, early = blocks[truth]
            print(
                f"{truth}: runs with a jump read on the blocks: {n}; healthy/benign or before onset: {early}"
            )
        return 0
    if clean_top is not None:
        print(
            f"largest spike in healthy/benign runs and before onsets: x{clean_top[0]:.2f} "
            f"({clean_top[1]}, step {clean_top[2]})"
        )
    low = min(stays) if stays else None
    print(
        f"fault runs with a spike of x{Params().jump_spike:g} at/after their onset: {len(stays)}; the next "
        f"checkpoint x1.2 over the level or more: {sum(s >= 1.2 for s, _ in stays)}, x1.0 or more: "
        f"{sum(s >= 1.0 for s, _ in stays)}" + (f"; lowest x{low[0]:.2f} ({low[1]})" if low else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
