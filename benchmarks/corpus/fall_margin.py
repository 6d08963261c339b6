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
Reads only the stored timelines.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.corpus import margin_cli  # noqa: E402 -- after the repository root is on sys.path


def largest_fall(result, since: int | None = None, reading: str = "window") -> tuple[float, int | None]:
    """The largest whole-model fall (``detect.fall_levels`` with ``reading``, at the layer the
    rule's count needs, the larger over the D2 series) read from step ``since`` on and before the
    divergence step, and the step it was read at (-inf, None: none read)."""
    from ckptscan.judge import detect

    tl = result.timeline
    div = (result.summary.get("loss") or {}).get("divergence_step")
    best: tuple[float, int | None] = (-np.inf, None)
    for _, fall, need in detect.fall_levels(tl, starts=detect.examined_from(tl)[0], reading=reading):
        here = margin_cli.largest_at_need(fall, need, tl.steps, div, since)
        if here[0] > best[0]:
            best = here
    return best


def main(argv=None) -> int:
    ap = margin_cli.parser(__doc__)
    ap.add_argument(
        "--reading", choices=("window", "high", "peak"), default="window", help="which fall reading"
    )
    args = ap.parse_args(argv)
    from ckptscan.api import load_result
    from ckptscan.judge.detect import Params

    need = {"high": Params().fall_high, "peak": Params().fall_peak}.get(args.reading, Params().fall)
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
                read[row["truth"]] += 1
                reach[row["truth"]] += largest_fall(result, row.get("onset"), args.reading)[0] >= need
    top = max(clean) if clean else None
    largest = f"{top[0]:.3f} ({top[2]}, step {top[1]})" if top and np.isfinite(top[0]) else "none read"
    print(f"reading: {args.reading}; healthy/benign runs read: {len(clean)}; largest fall: {largest}")
    for truth in sorted(read):
        print(f"{truth} runs read: {read[truth]}; reaching {need:g} at/after the onset: {reach[truth]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
