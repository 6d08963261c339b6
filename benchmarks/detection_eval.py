"""Regenerate the drill sets behind docs/detection.md and run ``ckptscan eval`` on each.

    python benchmarks/detection_eval.py --out /tmp/ckptscan-detection            # every set
    python benchmarks/detection_eval.py --out /tmp/ckptscan-detection --sets fresh

Each set is a folder of drill runs (``ckptscan drill``; deterministic: seeded, one thread each)
that is written once under ``OUT/<set>/runs`` (a run whose ``truth.json`` exists is kept), then
analysed into ``OUT/<set>/analysis`` and judged with ``ckptscan.drills.evaluate``: the table and the
totals are printed and written to ``OUT/<set>/eval.json``.  Nothing is written into the
repository.  About 70 s per run on one core; ``--jobs`` runs train side by side (default 2).

The sets, and what each was used for (docs/detection-history.md, "Results on the calibration runs"):
  calibration  the committed fixtures + seed-0 onset-500 runs + seeds 1/2: the rules were chosen here
  heldout      seeds 3/4, constant-LR schedule, a dense model (checked the update-ratio trend rule)
  replay       seeds 5/6, with replay files (checked the trend rule; act.* monitors studied)
  dense        seed 7, saves every 50 steps (its warm-up-cut false alarm led to the breadth rule)
  fresh        seeds 8/9, 50- and 100-step saves, written after both rules were fixed
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BASE = {"steps": 1500, "dtype": "bfloat16", "replay": False, "naming": "mixtral", "save_every": 100}


def lp(seed, onset, sev, **kw):
    return dict(fault="lowprec-attention", seed=seed, onset=onset, severity=sev, **kw)


def hl(seed, onset, sev, **kw):
    return dict(fault="high-lr", seed=seed, onset=onset, severity=sev, **kw)


def cb(seed, onset, sev, lr_sev, **kw):
    return dict(fault="combined", seed=seed, onset=onset, severity=sev, lr_severity=lr_sev, **kw)


def ok(seed, **kw):
    return dict(fault="none", seed=seed, **kw)


def benign(seed, onset, event, **kw):
    return dict(fault="none", seed=seed, onset=onset, benign=event, **kw)


REPLAY = {"replay": True, "replay_batch_size": 4, "replay_seq": 64}
E50 = {"save_every": 50}

SETS: dict[str, dict] = {
    "calibration": {
        "fixtures": "fixtures/drills",  # linked as drills-<name>
        "runs": {
            "cal5-lp": lp(0, 500, 1000),
            "cal5-lp15": lp(0, 500, 1500),
            "cal5-lp17": lp(0, 500, 1700),
            "cal5-lp18": lp(0, 500, 1850),
            "cal5-lp20": lp(0, 500, 2000),
            "cal5-hl": hl(0, 500, 8),
            "cal5-cb1": cb(0, 500, 1000, 8),
            "cal5-cb2": cb(0, 500, 500, 5),
            "cal5-cb3": cb(0, 500, 300, 4),
            "cal5-cb4": cb(0, 500, 200, 3),
            "drills-eval-healthy-s1": ok(1),
            "drills-eval-lowprec-s1-on300": lp(1, 300, 1200),
            "drills-eval-lowprec-s2-on500": lp(2, 500, 2000),
            "drills-eval-highlr-s2-on300": hl(2, 300, 10),
            "drills-eval-combined-s1-on300": cb(1, 300, 300, 4),
            "drills-eval-combined-s2-on500": cb(2, 500, 200, 3),
            "drills-eval-benign-dataswitch-s1-on500": benign(1, 500, "data-switch"),
            "drills-eval-benign-warmupcut-s2-on300": benign(2, 300, "warmup-cut"),
        },
    },
    "heldout": {
        "runs": {
            "healthy-s3": ok(3),
            "healthy-s4": ok(4),
            "healthy-const-s3": ok(3, schedule="constant"),
            "healthy-dense-s4": ok(4, naming="llama"),
            "lowprec-s3-on400": lp(3, 400, 1500),
            "lowprec-s4-on500": lp(4, 500, 1200),
            "highlr-s3-on600": hl(3, 600, 6),
            "highlr-s4-on400": hl(4, 400, 5),
            "highlr-const-s3-on600": hl(3, 600, 5, schedule="constant"),
            "combined-s3-on400": cb(3, 400, 200, 3),
            "combined-s3-on600": cb(3, 600, 500, 6),
            "combined-s4-on500": cb(4, 500, 300, 2.5),
            "benign-dataswitch-s3-on400": benign(3, 400, "data-switch"),
            "benign-warmupcut-s4-on500": benign(4, 500, "warmup-cut"),
        }
    },
    "replay": {
        "runs": {
            "healthy-s5": ok(5, **REPLAY),
            "healthy-s6": ok(6, **REPLAY),
            "lowprec-s5-on400": lp(5, 400, 1000, **REPLAY),
            "lowprec-s6-on500": lp(6, 500, 1500, **REPLAY),
            "highlr-s5-on400": hl(5, 400, 8, **REPLAY),
            "highlr-s6-on500": hl(6, 500, 6, **REPLAY),
            "combined-s5-on400": cb(5, 400, 200, 3, **REPLAY),
            "combined-s6-on500": cb(6, 500, 500, 5, **REPLAY),
            "combined-s6-on300": cb(6, 300, 300, 3, **REPLAY),
            "benign-warmupcut-s5-on400": benign(5, 400, "warmup-cut", **REPLAY),
            "benign-dataswitch-s5-on400": benign(5, 400, "data-switch", **REPLAY),
            "benign-dataswitch-s6-on500": benign(6, 500, "data-switch", **REPLAY),
        }
    },
    "dense": {
        "runs": {
            "healthy-s7": ok(7, **E50),
            "healthy-const-s7": ok(7, schedule="constant", **E50),
            "lowprec-s7-on500": lp(7, 500, 1200, **E50),
            "highlr-s7-on500": hl(7, 500, 6, **E50),
            "combined-s7-on500": cb(7, 500, 300, 4, **E50),
            "benign-warmupcut-s7-on500": benign(7, 500, "warmup-cut", **E50),
        }
    },
    "fresh": {
        "runs": {
            "healthy-s8-e50": ok(8, **E50),
            "healthy-s9": ok(9),
            "healthy-const-s9": ok(9, schedule="constant"),
            "lowprec-s8-on600-e50": lp(8, 600, 1500, **E50),
            "lowprec-s9-on400": lp(9, 400, 1000),
            "highlr-s8-on400-e50": hl(8, 400, 5, **E50),
            "highlr-s9-on500": hl(9, 500, 7),
            "combined-s8-on500-e50": cb(8, 500, 200, 3, **E50),
            "combined-s9-on400": cb(9, 400, 300, 3),
            "benign-dataswitch-s8-on500-e50": benign(8, 500, "data-switch", **E50),
            "benign-warmupcut-s8-on600-e50": benign(8, 600, "warmup-cut", **E50),
            "benign-warmupcut-s9-on700": benign(9, 700, "warmup-cut"),
        }
    },
}


def _train(out_dir: str, kw: dict) -> str:
    from ckptscan.drills.train import run_drill

    run_drill(out_dir, **{**BASE, **kw})
    return out_dir


def generate(set_dir: Path, spec: dict, jobs: int) -> None:
    runs = set_dir / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    if "fixtures" in spec:
        for fx in sorted((ROOT / spec["fixtures"]).iterdir()):
            link = runs / f"drills-{fx.name}"
            if (fx / "truth.json").is_file() and not link.exists():
                link.symlink_to(fx.resolve(), target_is_directory=True)
    todo = {name: kw for name, kw in spec["runs"].items() if not (runs / name / "truth.json").is_file()}
    if not todo:
        return
    print(f"{set_dir.name}: training {len(todo)} run(s) ...", file=sys.stderr)
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        for done in pool.map(_train, [str(runs / n) for n in todo], list(todo.values())):
            print(f"  {Path(done).name}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--out", type=Path, required=True, help="where the sets are written (outside the repository)"
    )
    ap.add_argument("--sets", default=",".join(SETS), help=f"comma-separated subset of {', '.join(SETS)}")
    ap.add_argument("--jobs", type=int, default=2, help="drills trained side by side")
    args = ap.parse_args()
    from ckptscan.drills import evaluate

    for name in [s for s in args.sets.split(",") if s]:
        if name not in SETS:
            ap.error(f"unknown set {name!r}")
        set_dir = args.out / name
        generate(set_dir, SETS[name], args.jobs)
        rows = evaluate.evaluate(set_dir / "runs", out_root=set_dir / "analysis")
        totals = evaluate.totals(rows)
        (set_dir / "eval.json").write_text(
            json.dumps({"rows": rows, "totals": totals}, indent=1, default=str)
        )
        print(f"## {name}\n{evaluate.format_table(rows)}\n{json.dumps(totals)}\n")


if __name__ == "__main__":
    main()
