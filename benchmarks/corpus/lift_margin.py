"""How far the whole model's step size lifts off a level it held, per run: the margin the lift rule
(``detect.lift_alarms``) sits in.

    python benchmarks/corpus/lift_margin.py --ana /work/corpus-ana/holdout20 /work/corpus-ana/holdout21

For every analysed run with an ``eval.json`` row beside it (``score.py`` writes both): the largest
lift factor the rule reads at any checkpoint before the loss diverged, across the model (at each
checkpoint the layer lift, the smaller of the attention step size's and the output projections'
over the level they held from half the steps so far to a third of that before, lowest over three
checkpoints, ``detect.lift_levels``; taken at the layer the rule's count needs: the rule fires where
this reaches ``Params.lift``). 1.0: none. Prints the largest among healthy and benign runs (how
far they stay from the rule's bar) and, for the high-LR and combined runs, how many reach it at or
after their onset. Reads only the stored timelines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.corpus import margin_cli  # noqa: E402 -- after the repository root is on sys.path


def largest_lift(result, since: int | None = None) -> float:
    """The largest whole-model lift factor (``detect.lift_levels``, at the layer the rule's count
    needs) read from step ``since`` on and before the divergence step (1.0: none read)."""
    from ckptscan.judge import detect

    tl = result.timeline
    lift, need = detect.lift_levels(tl)
    div = (result.summary.get("loss") or {}).get("divergence_step")
    best, _ = margin_cli.largest_at_need(lift, need, tl.steps, div, since)
    return float(np.exp(best)) if np.isfinite(best) else 1.0


def main(argv=None) -> int:
    ap = margin_cli.parser(__doc__)
    args = ap.parse_args(argv)
    from ckptscan.api import load_result

    clean, faults = [], []
    for root in args.ana:
        for row in json.loads((root / args.eval).read_text())["rows"]:
            if row["truth"] == "healthy":
                clean.append((largest_lift(load_result(root / row["run"])), row["run"]))
            elif row["truth"] in ("high_lr", "combined"):
                faults.append(largest_lift(load_result(root / row["run"]), row.get("onset")))
    top = max(clean) if clean else None
    largest = f"x{top[0]:.2f} ({top[1]})" if top and top[0] > 1.0 else "none (no lift in enough layers)"
    print(f"healthy/benign runs read: {len(clean)}; largest lift: {largest}")
    from ckptscan.judge import detect

    bar = detect.Params().lift
    print(
        f"high-LR and combined runs read: {len(faults)}; reaching x{bar:g} at or after their onset: "
        f"{sum(r >= bar for r in faults)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
