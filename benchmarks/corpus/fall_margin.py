"""How far the heads' D2 entropy falls slowly across the model, per run: the margin the fall rule
(``detect.fall_alarms``) sits in.

    python benchmarks/corpus/fall_margin.py --ana /work/corpus-ana/final /work/corpus-ana/holdout3

For every analysed run with an ``eval.json`` row beside it (``score.py`` writes both): the largest
fall the rule reads at any checkpoint before the loss diverged, across the model (at each
checkpoint the layer fall, the median over the layer's heads of D2 entropy 2 against its level two
settling times to a third of that before, least over three checkpoints, ``detect.fall_levels``;
taken at the layer the rule's count needs: the rule fires where this reaches ``Params.fall``).
Prints the largest among healthy and benign runs (how far they stay under the rule's bar,
``Params.fall``) and, per fault class, how many runs reach it at or after their onset. Stricter
than detection: the three checkpoints a fall reads must all lie before the divergence (a detection
needs only its first).
``--reading high``: the same for the fall from the settled high (``Params.fall_high``: the layer's
median against the highest it stood at, over three checkpoints, from ``Params.fall_high_from``
times its settling step on), against its own bar; ``--reading peak``: the fall from the high after
the warm-up's peak (``Params.fall_peak``: from the checkpoint at which the step size's peak passed,
``detect.warmup_peak``), against its bar.
``--reading settling``: a reading no rule makes, measured and not kept (docs/detection-history.md,
"The fall from the settling, measured, and `holdout69`"): the layer's median against the median it
held from half its settling step to its settling step, after the settling, least over three
checkpoints, against ``Params.fall_high``'s bar: a fall that began before the run settled, read
from where the layer stood as it settled.
Reads only the stored timelines.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.corpus import margin_cli  # noqa: E402 -- after the repository root is on sys.path


def largest_fall(result, since: int | None = None, reading: str = "window") -> tuple[float, int | None]:
    """The largest whole-model fall (``detect.fall_levels`` with ``reading``, or ``settling_levels``
    for "settling", at the layer the
    rule's count needs, the larger over the D2 series) read from step ``since`` on and before the
    divergence step, and the step it was read at (-inf, None: none read)."""
    from ckptscan.judge import detect

    tl = result.timeline
    div = (result.summary.get("loss") or {}).get("divergence_step")
    best: tuple[float, int | None] = (-np.inf, None)
    if reading == "settling":
        levels = settling_levels(tl, detect.Params().persist)
    else:
        levels = [
            (f, k) for _, f, k in detect.fall_levels(tl, starts=detect.examined_from(tl)[0], reading=reading)
        ]
    for fall, need in levels:
        here = margin_cli.largest_at_need(fall, need, tl.steps, div, since)
        if here[0] > best[0]:
            best = here
    return best


def settling_levels(timeline, persist: int) -> list[tuple[np.ndarray, int]]:
    """Per D2-entropy series, ([N, L] falls, need) of ``--reading settling``: per layer, its median
    over its heads against the median of that from half its settling step to its settling step
    (``detect.examined_from``; two values at least), less the highest of its values at i .. i +
    persist - 1, for every checkpoint i after the settling; NaN elsewhere.  ``need``: the layers
    ``detect.fall_levels`` would need."""
    from ckptscan.judge import detect

    det = next(d for d in detect.DETECTORS if d.monitor == detect.DEPTH_MONITOR)
    steps = np.asarray(timeline.steps, dtype=np.float64)
    n = len(steps)
    starts = detect.examined_from(timeline)[0]
    span = max(1, persist)  # the checkpoints one reading covers
    out = []
    for name in detect._series_for(timeline, det):
        arr = np.asarray(timeline.get(name), dtype=np.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a checkpoint with no head read
            med = np.nanmedian(arr.reshape(n, arr.shape[1], -1), axis=2)
        fall = np.full(med.shape, np.nan)
        read = np.isfinite(med).any(axis=0)
        for layer in np.flatnonzero(read).tolist():
            s0 = int(starts[layer]) if layer < len(starts) else n
            if s0 >= n:
                continue
            settled = steps[s0]
            held = med[(steps >= settled / 2) & (steps <= settled), layer]
            held = held[np.isfinite(held)]
            if len(held) < 2:
                continue
            for i in range(s0 + 1, n - span + 1):
                now = med[i : i + span, layer]
                if np.isfinite(now).all():
                    fall[i, layer] = float(np.median(held)) - float(now.max())
        out.append((fall, detect._layers_needed(int(read.sum()))))
    return out


def main(argv=None) -> int:
    ap = margin_cli.parser(__doc__)
    ap.add_argument(
        "--reading",
        choices=("window", "high", "peak", "settling"),
        default="window",
        help="which fall reading",
    )
    ap.add_argument(
        "--fault",
        metavar="CLASS",
        help="also print each run of this true class (lowprec_attention, combined, high_lr): its "
        "verdict and its largest fall at or after its onset, with the step",
    )
    args = ap.parse_args(argv)
    from ckptscan.api import load_result
    from ckptscan.judge.detect import Params

    bars = {"high": Params().fall_high, "peak": Params().fall_peak, "settling": Params().fall_high}
    need = bars.get(args.reading, Params().fall)
    clean: list[tuple[float, int | None, str]] = []
    read, reach = Counter(), Counter()
    for root in args.ana:
        for row in json.loads((root / args.eval).read_text())["rows"]:
            if row.get("verdict") == "error":
                continue
            result = load_result(root / row["run"])
            if row["truth"] == "healthy":
                clean.append((*largest_fall(result, reading=args.reading), row["run"]))
            else:
                fall, step = largest_fall(result, row.get("onset"), args.reading)
                read[row["truth"]] += 1
                reach[row["truth"]] += fall >= need
                if row["truth"] == args.fault:
                    shown = f"{fall:.3f} (step {step})" if np.isfinite(fall) else "none read"
                    print(f"{row['run']}: {row['verdict']}, largest fall {shown}")
    top = max(clean) if clean else None
    largest = f"{top[0]:.3f} ({top[2]}, step {top[1]})" if top and np.isfinite(top[0]) else "none read"
    print(f"reading: {args.reading}; healthy/benign runs read: {len(clean)}; largest fall: {largest}")
    for truth in sorted(read):
        print(f"{truth} runs read: {read[truth]}; reaching {need:g} at/after the onset: {reach[truth]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
