"""How far the whole model's step size jumped at one checkpoint next to a collapse, per run: the
margin the ``combined/jump`` path (``classify.COLLAPSE_JUMP``) sits in.

    python benchmarks/corpus/collapse_jump_margin.py --ana /work/corpus-ana/final /work/corpus-ana/holdout3

For every analysed run with an ``eval.json`` row beside it (``score.py`` writes both) whose
deciding alarms hold a D2-entropy collapse (the classifier's ``s0``: the first structure alarm
triggered before the loss diverged, or of all where none was): the largest one-checkpoint
whole-model jump (``detect.model_jump``, unread at and after the divergence step) at the
collapse's point or within ``classify.DECISION_WINDOW`` points before it, up to its trigger
(``classify.jump_with``). Prints, per true class, the runs read and how many reach
``COLLAPSE_JUMP``, and the largest factor among the low-precision runs (how far they stay below
it). A run counted here may take another path (the step size grew before the collapse, or with
it): these are the runs the reading is taken on, not those it changes. Default ``Params`` (what
``score.py`` analyses with). Reads only the stored timelines.

``--reading before``: the largest such jump at any checkpoint up to the collapse's point (the
window above included), up to its trigger: the margin the ``combined/jump-before`` path
(``detect.Params.jump_before``) sits in.

``--reading projections``: the same for the ``combined/projections-up`` path
(``classify.PROJ_RISE``): the output projections' step size over where it stood 1/3 to 2 settling
times before, across the model (``detect.projections_rise``), read at the same checkpoints.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.corpus import margin_cli  # noqa: E402 -- after the repository root is on sys.path


def jump_at_collapse(result, reading: str = "jump") -> float | None:
    """The largest one-checkpoint whole-model jump factor (``reading`` "jump"; "before": at any
    checkpoint up to the collapse) or projections' rise (``reading`` "projections") next to the
    run's deciding collapse, read as the classifier reads it (None: no collapse decides, or nothing
    read there)."""
    from ckptscan.judge import classify, detect, verdict

    det = detect.run_detection(result.timeline)
    div = (result.summary.get("loss") or {}).get("divergence_step")
    collapse = classify.collapse_at(classify.decisive(det.alarms, det.point_at_or_after(div)))
    if collapse is None:
        return None
    values = det.proj_rise if reading == "projections" else det.model_jump
    window = collapse[0] if reading == "before" else classify.DECISION_WINDOW
    read = classify.jump_with(verdict.before_divergence(values, div), *collapse, window=window)
    return None if read is None else read[0]


def main(argv=None) -> int:
    ap = margin_cli.parser(__doc__)
    ap.add_argument("--reading", choices=("jump", "before", "projections"), default="jump")
    args = ap.parse_args(argv)
    from ckptscan.api import load_result
    from ckptscan.judge.classify import COLLAPSE_JUMP, PROJ_RISE
    from ckptscan.judge.detect import Params

    threshold = {"jump": COLLAPSE_JUMP, "before": Params().jump_before, "projections": PROJ_RISE}[
        args.reading
    ]

    read: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for root in args.ana:
        for row in json.loads((root / args.eval).read_text())["rows"]:
            factor = jump_at_collapse(load_result(root / row["run"]), args.reading)
            if factor is not None:
                read[row["truth"]].append((factor, row["run"]))
    for truth in sorted(read):
        hits = sum(f >= threshold for f, _ in read[truth])
        print(
            f"{truth}: runs with a reading next to a deciding collapse: {len(read[truth])}; "
            f"reaching x{threshold}: {hits}"
        )
    low = read.get("lowprec_attention")
    if low:
        top = max(low)
        print(f"largest among low-precision runs: x{top[0]:.2f} ({top[1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
