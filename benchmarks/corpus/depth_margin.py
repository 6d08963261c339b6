"""How deep D2-entropy falls go, per run: the margin the depth rule (``detect.depth_alarms``) sits in.

    python benchmarks/corpus/depth_margin.py --ana /work/corpus-ana/final /work/corpus-ana/holdout3

For every analysed run with an ``eval.json`` row beside it (``score.py`` writes both): the deepest
fall of any head's D2 entropy (alpha 2) below its settled level (the median of its first five
values examined, ``detect.DEPTH_REF``), read as the median of three values in a row (examined,
defined), before the loss diverged. Prints the shallowest such fall among healthy and benign runs
(how far they stay from the rule's 0.1) and how many low-precision and combined runs fell below
0.1 and 0.05. Reads only the stored timelines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.corpus import margin_cli  # noqa: E402 -- after the repository root is on sys.path


def deepest_fall(result) -> float | None:
    """The lowest median-of-three ratio of any head's D2 entropy to its settled level, before the
    divergence step (None: no head has enough values examined)."""
    from ckptscan.judge import detect

    tl = result.timeline
    if detect.DEPTH_MONITOR not in tl:
        return None
    steps = np.asarray(tl.steps)
    m = np.asarray(tl.get(detect.DEPTH_MONITOR), dtype=np.float64)
    heads = detect.examined_from(tl)[1]
    div = (result.summary.get("loss") or {}).get("divergence_step")
    end = len(steps) if div is None else int(np.searchsorted(steps, div))
    best = None
    for layer in range(m.shape[1]):
        for head in range(m.shape[2]):
            col = m[:, layer, head]
            start = int(heads[layer, min(head, heads.shape[1] - 1)]) if layer < heads.shape[0] else len(steps)
            idx = [i for i in range(start, len(steps)) if np.isfinite(col[i])]
            if len(idx) < detect.DEPTH_REF + 3:
                continue
            ref = np.median(col[idx[: detect.DEPTH_REF]])
            for k in range(detect.DEPTH_REF, len(idx) - 2):
                if idx[k] >= end:
                    break
                r = float(np.median(col[idx[k : k + 3]]) / ref)
                best = r if best is None else min(best, r)
    return best


def main(argv=None) -> int:
    ap = margin_cli.parser(__doc__)
    args = ap.parse_args(argv)
    from ckptscan.api import load_result

    clean, faulty = [], []
    for root in args.ana:
        for row in json.loads((root / args.eval).read_text())["rows"]:
            fall = deepest_fall(load_result(root / row["run"]))
            if fall is None:
                continue
            if row["truth"] == "healthy":
                clean.append((fall, row["run"]))
            elif row["truth"] in ("lowprec_attention", "combined"):
                faulty.append(fall)
    low = min(clean) if clean else None
    print(
        f"healthy/benign runs read: {len(clean)}; shallowest deepest fall: "
        + (f"{low[0]:.3f} ({low[1]})" if low else "-")
    )
    print(
        f"low-precision and combined runs read: {len(faulty)}; below 0.1: {sum(f < 0.1 for f in faulty)}, "
        f"below 0.05: {sum(f < 0.05 for f in faulty)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
