"""What a fault run's monitors showed against its healthy twin before the loss diverged: how many
fault runs any reading of the checkpoints could have found, and how many of those the rules did.

    python benchmarks/corpus/twin_ceiling.py --ana /work/corpus-ana/holdout44 /work/corpus-ana/holdout45

Every corpus run has a healthy twin: the run of the same recipe (``truth.json`` ``recipe``; the
twin is ``<recipe>-healthy``), which trains on the same batches from the same initial weights.
Training is deterministic, so up to the fault's onset the two runs' checkpoints are the same, and
every difference after it is the fault's doing. The rules read each run against itself (its own
earlier checkpoints): a departure the twin does not show is the most any of them could read. So,
per fault run, at each checkpoint both runs saved at or after the onset and before the divergence
step (to the end of the run where it did not diverge), this reads:

- **step size**: per layer, the smaller of two factors, the attention step size (``detect.step_size``:
  q, k and router update ratios) over the twin's, and the output projections' update ratio over the
  twin's (where the layout has them): an LR that grew moves both; taken at the layer the
  whole-model rules need (``detect._layers_needed``: three quarters of the layers);
- **structure**: the largest fall of a layer's median D2 entropy (alpha 2, of 1) under the twin's.

A fault run is *visible* at a bar pair (step factor, entropy fall) where one checkpoint reaches
either. The gentlest bars the rules use for a whole-model reading are x1.25 (the rise rule) and
0.07 (the fall rule); one checkpoint of departure is less than any rule needs (three, or a
collapse and its company), so this is a ceiling, not a rule. Prints, per bar pair, how many fault
runs were visible and how many of those were detected (``eval.json``: at or after the onset, before
the divergence), then the runs that were not visible at the gentlest pair and the ones visible there
but not detected (how many of those had three checkpoints or more in the window, what the rules'
persistence needs, and did harm). Reads only the stored timelines and each run's ``truth.json``.
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

from benchmarks.corpus import breakdown, margin_cli  # noqa: E402 -- after the repository root is on sys.path

BARS = ((1.25, 0.07), (1.5, 0.15), (2.0, 0.3))  # (step-size factor, entropy fall) pairs read
PERSIST = 3  # checkpoints in the window: what the rules' persistence needs (``Params.persist``)


def departures(ft, tt, onset: int, divergence: int | None) -> tuple[float, float, int]:
    """(largest step-size factor over the twin at the layer count needed, largest fall of a
    layer's median D2 entropy under the twin's, checkpoints read) over the checkpoints both
    timelines (``ft``: the fault run's, ``tt``: its twin's) hold at or after ``onset`` and before
    ``divergence``; (1.0, 0.0, 0) where there are none."""
    from ckptscan.judge import detect

    shared = sorted(set(int(s) for s in ft.steps) & set(int(s) for s in tt.steps))
    shared = [s for s in shared if s >= onset and (divergence is None or s < divergence)]
    if not shared:
        return 1.0, 0.0, 0
    fi = [int(np.searchsorted(ft.steps, s)) for s in shared]
    ti = [int(np.searchsorted(tt.steps, s)) for s in shared]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        fg, fo = detect._model_steps(ft)
        tg, to = detect._model_steps(tt)
        up = fg[fi] - tg[ti]  # log factor per layer
        if np.isfinite(fo).any() and np.isfinite(to).any():
            up = np.fmin(up, fo[fi] - to[ti])  # both must move (NaN where either is unread)
        need = detect._layers_needed(up.shape[1])
        read = np.where(np.isfinite(up), up, -np.inf)
        at_need = np.sort(read, axis=1)[:, ::-1][:, need - 1] if need > 0 else np.full(len(fi), -np.inf)
        step = float(np.exp(np.max(at_need))) if np.isfinite(at_need).any() else 1.0
        fall = 0.0
        name = detect.DEPTH_MONITOR
        if name in ft and name in tt:
            ef = np.nanmedian(np.asarray(ft.get(name), dtype=np.float64), axis=2)[fi]
            et = np.nanmedian(np.asarray(tt.get(name), dtype=np.float64), axis=2)[ti]
            d = et - ef
            if np.isfinite(d).any():
                fall = float(np.nanmax(d))
    return step, fall, len(shared)


def main(argv=None) -> int:
    ap = margin_cli.parser(__doc__)
    args = ap.parse_args(argv)
    from ckptscan.api import load_result

    read: list[dict] = []
    no_twin = 0
    for root in args.ana:
        rows = json.loads((root / args.eval).read_text())["rows"]
        names = {r["run"] for r in rows}
        for row in rows:
            if row["truth"] == "healthy" or row.get("onset") is None:
                continue
            fault = load_result(root / row["run"])
            truth = json.loads((Path(fault.summary["run"]) / "truth.json").read_text())
            twin_name = f"{truth.get('recipe')}-healthy"
            if twin_name not in names:
                no_twin += 1
                continue
            twin = load_result(root / twin_name)
            step, fall, n = departures(
                fault.timeline, twin.timeline, int(row["onset"]), row.get("divergence")
            )
            cadence = breakdown.DIMENSIONS["cadence"](truth)
            read.append({**row, "step": step, "fall": fall, "shared": n, "cadence": cadence})
    print(f"fault runs read against their healthy twin: {len(read)} ({no_twin} without a twin)")
    for bar_step, bar_fall in BARS:
        vis = [r for r in read if r["step"] >= bar_step or r["fall"] >= bar_fall]
        det = sum(bool(r.get("detected")) for r in vis)
        print(
            f"visible at x{bar_step:g} step size or {bar_fall:g} entropy fall: {len(vis)}/{len(read)}; "
            f"detected {det}/{len(vis)}; detected though not visible: "
            f"{sum(bool(r.get('detected')) for r in read if r not in vis)}"
        )
    bar_step, bar_fall = BARS[0]
    hidden = [r for r in read if not (r["step"] >= bar_step or r["fall"] >= bar_fall)]
    print(
        f"not visible at the gentlest bars: {len(hidden)}; no shared checkpoint in the window: "
        f"{sum(r['shared'] == 0 for r in hidden)}; by class {dict(Counter(r['truth'] for r in hidden))}; "
        f"by cadence {dict(sorted(Counter(r['cadence'] for r in hidden).items()))}; "
        f"did harm {sum(bool(r.get('harmed')) for r in hidden)}"
    )
    missed = [r for r in read if r not in hidden and not r.get("detected")]
    print(
        f"visible at the gentlest bars, not detected: {len(missed)}; of them with {PERSIST} checkpoints "
        f"or more in the window: {sum(r['shared'] >= PERSIST for r in missed)}, harm "
        f"{sum(bool(r.get('harmed')) for r in missed if r['shared'] >= PERSIST)}"
    )
    for r in sorted(missed, key=lambda r: r["run"]):
        print(
            f"  {r['run']}: x{r['step']:.2f}, fall {r['fall']:.2f}, {r['shared']} checkpoints; "
            f"read {r['verdict']} ({r['decision']}), harm {'yes' if r.get('harmed') else 'no'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
