"""Generate the calibration corpus: many small training runs from real training stacks, with injected
faults and known ground truth (``truth.json`` in each run folder; see README.md beside this file).

    python benchmarks/corpus/generate.py --out /work/corpus --part calibration --jobs 2
    python benchmarks/corpus/generate.py --out /work/corpus --part calibration --list
    python benchmarks/corpus/generate.py --out /work/corpus --part calibration --summary
    python benchmarks/corpus/generate.py --out /tmp/corpus-smoke --smoke     # one tiny run per stack

Runs go to ``OUT/<part>/<run name>/`` (``OUT/smoke/`` for ``--smoke``).  A run whose ``truth.json``
exists is skipped; a folder without one (an interrupted run) is deleted and trained again.  Each run
trains on one thread; ``--jobs`` runs train side by side.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib
import json
import shutil
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``benchmarks.corpus`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.corpus.recipes import PARTS, smoke_specs

STACKS = {
    "hf": "benchmarks.corpus.hf_trainer",
    "plain": "benchmarks.corpus.plain_loop",
    "lightning": "benchmarks.corpus.lightning_run",
}


def train_one(run_dir: str, spec) -> dict:
    """Train ``spec`` into ``run_dir`` (one thread); returns its truth."""
    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    run = Path(run_dir)
    if run.exists():
        shutil.rmtree(run)
    run.mkdir(parents=True)
    return importlib.import_module(STACKS[spec.framework]).train(run, spec)


def summary_row(name: str, truth: dict) -> str:
    lr = f"{truth['lr_shape']} {truth['lr_severity']:g}" if truth.get("lr_shape") else "-"
    sev = f"{truth['severity']:g}" if truth.get("severity") is not None else "-"
    return (
        f"{name:<78} {truth['fault']:<17} {truth.get('benign') or '-':<11} {sev:>6} {lr:<15} "
        f"{_cell(truth['onset_step'] or truth.get('benign_step')):>6} "
        f"{_cell(truth['divergence_step']):>6} "
        f"{_cell(truth['nan_step']):>6} {truth['steps_run']:>5}/{truth['steps_planned']:<5} "
        f"{_cell(truth.get('final_loss')):>7} {truth['elapsed_s']:>7.1f}"
    )


SUMMARY_HEAD = (
    f"{'run':<78} {'fault':<17} {'benign':<11} {'lp sev':>6} {'lr fault':<15} {'onset':>6} "
    f"{'diverg':>6} {'nan':>6} {'run/planned':<11} {'loss':>7} {'seconds':>7}"
)


def _cell(v) -> str:
    return "-" if v is None else str(v)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--out", type=Path, required=True, help="where the parts are written (outside the repository)"
    )
    ap.add_argument("--part", choices=sorted(PARTS), default="calibration")
    ap.add_argument("--jobs", type=int, default=2, help="runs trained side by side (one thread each)")
    ap.add_argument("--only", metavar="GLOB", help="only runs whose name matches GLOB")
    ap.add_argument("--list", action="store_true", help="list the part's runs and exit")
    ap.add_argument("--summary", action="store_true", help="print the table of the runs already generated")
    ap.add_argument("--smoke", action="store_true", help="one tiny run per training stack, into OUT/smoke")
    args = ap.parse_args(argv)

    specs = smoke_specs() if args.smoke else PARTS[args.part]()
    if args.only:
        specs = [s for s in specs if fnmatch.fnmatch(s.name, args.only)]
    part_dir = args.out / ("smoke" if args.smoke else args.part)
    if args.list:
        for s in specs:
            print(s.name)
        print(
            f"{len(specs)} runs: {sum(s.fault == 'none' for s in specs)} healthy/benign, "
            f"{sum(s.fault != 'none' for s in specs)} fault, {sum(s.steps for s in specs)} steps planned"
        )
        return 0
    if args.summary:
        print(SUMMARY_HEAD)
        for s in specs:
            tp = part_dir / s.name / "truth.json"
            if tp.is_file():
                print(summary_row(s.name, json.loads(tp.read_text())))
        return 0

    todo = [s for s in specs if not (part_dir / s.name / "truth.json").is_file()]
    if part_dir.is_dir() and not args.only:
        stale = sorted({p.name for p in part_dir.iterdir() if p.is_dir()} - {s.name for s in specs})
        for name in stale:
            print(
                f"note: {part_dir / name} is not in the part's list (an older recipe?): left alone",
                file=sys.stderr,
            )
    print(
        f"{part_dir}: {len(specs) - len(todo)} runs present, training {len(todo)} ...",
        file=sys.stderr,
        flush=True,
    )
    t0 = time.perf_counter()
    print(SUMMARY_HEAD, flush=True)
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(train_one, str(part_dir / s.name), s): s for s in todo}
        failed = 0
        for fut in as_completed(futures):
            s = futures[fut]
            try:
                print(summary_row(s.name, fut.result()), flush=True)
            except Exception as e:  # noqa: BLE001 -- the others go on; the failed run has no truth.json
                failed += 1
                print(f"{s.name}: FAILED {type(e).__name__}: {e}", flush=True)
    elapsed = time.perf_counter() - t0
    print(f"done: {len(todo) - failed} trained, {failed} failed, {elapsed:.0f} s", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
