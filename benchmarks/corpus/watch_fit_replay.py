"""Watch rounds replayed on stored timelines: where the blocks' fit (``Params.block_fit``) makes a
round's blocks differ from the same round's without it, does that round raise an alarm?

    python benchmarks/corpus/watch_fit_replay.py --ana /work/corpus-ana/holdout43 /work/corpus-ana/holdout44

For every healthy or benign run with an ``eval.json`` row beside it (``score.py`` writes both):
each prefix of its checkpoints from the fourth on is one ``ckptscan watch`` round (the checkpoints
so far). Only the rounds where the block size with the fit differs from the block size without it
are read (elsewhere the two agree); per run, the first such round whose detection raises an alarm,
with the fit and without it. The finished run's analysis is the run's row in ``eval.json``.
Detection only (``detect.run_detection``), default ``Params``; reads only the stored timelines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.corpus import margin_cli  # noqa: E402 -- after the repository root is on sys.path


def first_round_alarms(timeline) -> tuple[int, int | None, int | None]:
    """(rounds where the fit changes the block, the step of the first such round with an alarm with
    the fit, the same without it; None: no alarm)."""
    from ckptscan.judge import detect

    on, off = detect.Params(), detect.Params(block_fit=False)
    steps = np.asarray(timeline.steps)
    rounds, first_on, first_off = 0, None, None
    for m in range(4, len(steps) + 1):
        pre = type(timeline).from_arrays(
            steps[:m], {k: np.asarray(v)[:m] for k, v in timeline.series.items()}, dict(timeline.meta)
        )
        starts = detect.layer_starts(pre)
        if detect.block_size(pre, starts, on) == detect.block_size(pre, starts, off):
            continue
        rounds += 1
        if first_on is None and detect.run_detection(pre, on).alarms:
            first_on = int(steps[m - 1])
        if first_off is None and detect.run_detection(pre, off).alarms:
            first_off = int(steps[m - 1])
    return rounds, first_on, first_off


def main(argv=None) -> int:
    ap = margin_cli.parser(__doc__)
    args = ap.parse_args(argv)
    from ckptscan.api import load_result

    runs = rounds = 0
    with_fit, without = [], []
    for root in args.ana:
        for row in json.loads((root / args.eval).read_text())["rows"]:
            if row["truth"] != "healthy":
                continue
            n, a, b = first_round_alarms(load_result(root / row["run"]).timeline)
            runs, rounds = runs + 1, rounds + n
            if a is not None:
                with_fit.append(f"{row['run']} (step {a}; the finished run: {row['verdict']})")
            if b is not None:
                without.append(f"{row['run']} (step {b}; the finished run: {row['verdict']})")
    print(f"healthy/benign runs: {runs}; rounds where the fit changes the block: {rounds}")
    print(f"runs with an alarm in such a round, with the fit: {len(with_fit)}")
    for line in with_fit:
        print("  " + line)
    print(f"... without it (the same rounds): {len(without)}")
    for line in without:
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
