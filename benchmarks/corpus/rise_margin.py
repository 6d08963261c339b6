"""How far the whole model's step size rises slowly, per run: the margin the rise rule
(``detect.rise_alarms``) sits in.

    python benchmarks/corpus/rise_margin.py --ana /work/corpus-ana/final /work/corpus-ana/holdout3

For every analysed run with an ``eval.json`` row beside it (``score.py`` writes both): the largest
rise factor the rule reads at any checkpoint before the loss diverged, across the model (at each
checkpoint the layer rise, the smaller of the attention step size's and the output projections'
gradual, restart-free rise over their level two settling times before, lowest over three
checkpoints, ``detect.rise_levels``; taken at the layer the rule's count needs: the rule fires
where this reaches ``Params.rise``). 1.0: none. Prints the largest among healthy and benign runs
(how far they stay from the rule's bar, ``Params.rise``) and, for the high-LR runs, how many reach
it. Reads only the stored timelines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.corpus import margin_cli  # noqa: E402 -- after the repository root is on sys.path


def largest_rise(result) -> float:
    """The largest whole-model rise factor (``detect.rise_levels``, at the layer the rule's count
    needs) before the divergence step (1.0: none read)."""
    from ckptscan.judge import detect

    tl = result.timeline
    rise, need = detect.rise_levels(tl, starts=detect.examined_from(tl)[0])
    div = (result.summary.get("loss") or {}).get("divergence_step")
    best, _ = margin_cli.largest_at_need(rise, need, tl.steps, div)
    return float(np.exp(best)) if np.isfinite(best) else 1.0


def main(argv=None) -> int:
    ap = margin_cli.parser(__doc__)
    args = ap.parse_args(argv)
    from ckptscan.api import load_result

    clean, high = [], []
    for root in args.ana:
        for row in json.loads((root / args.eval).read_text())["rows"]:
            rise = largest_rise(load_result(root / row["run"]))
            if row["truth"] == "healthy":
                clean.append((rise, row["run"]))
            elif row["truth"] == "high_lr":
                high.append(rise)
    top = max(clean) if clean else None
    largest = (
        f"x{top[0]:.2f} ({top[1]})" if top and top[0] > 1.0 else "none (no gradual rise in enough layers)"
    )
    print(f"healthy/benign runs read: {len(clean)}; largest rise: {largest}")
    from ckptscan.judge import detect

    bar = detect.Params().rise
    print(f"high-LR runs read: {len(high)}; reaching x{bar:g}: {sum(r >= bar for r in high)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
