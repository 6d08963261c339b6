"""Score ckptscan on corpus parts (and drill sets): every table docs/detection.md gives.

    python benchmarks/corpus/score.py --runs /work/corpus/calibration --out /work/corpus-ana/calibration
    python benchmarks/corpus/score.py --runs /work/corpus/reported --out /work/corpus-ana/reported --jobs 2
    python benchmarks/corpus/score.py --runs /work/corpus/calibration /work/drillsets/*/runs --confidence
    python benchmarks/corpus/score.py --runs /work/corpus/calibration --out DIR --set block=0   # other rules

Each run folder (with a truth.json) is analysed like any run (``ckptscan.api.analyze``, results
cached under ``--out/<run>``: a re-run only re-judges), then scored with
``ckptscan.drills.evaluate``. Prints what trained the runs (``generated_with``), the totals, the
breakdown per recipe dimension (``breakdown.py``), the lead over the log-only rule per fault class,
and the confidence check: per decision path, how many verdicts had the right class, how often
verdicts with confidence >= 0.9 were right, and how often at each lower level (``reliability``).
``--confidence`` prints the table in the form ``ckptscan.judge.classify.CONFIDENCE`` takes (only
for calibration runs: the confidence is set there, then checked on the reported part).
``--set NAME=VALUE`` (any ``ckptscan.judge.detect.Params`` field, repeatable) judges the stored
timelines again under other detection parameters: how the documented choices were compared.
``--stored`` analyses nothing and judges every run from its stored result alone (the current
rules, or ``--set``): a part whose checkpoint weights were deleted to save disk, logs and
truth.json kept, can still be judged again.
``--reference twin`` judges each fault and benign run against its healthy twin (``--baseline``: the
run of the same recipe, the same initial weights and batches until the onset; the healthy runs
are left out), the most favourable reference there can be; ``--reference DIR --reference-out
ROOT`` judges every run against the healthy run of DIR trained with the same recipe and another
seed (a reference part, ``recipes.holdout64ref``; its runs analysed under ROOT first, by this
script), as a team would compare with an earlier run of the same configuration.  Both judge
stored results (the runs are analysed first where they were not).
Rows go to ``--out/eval.json`` (``eval-<settings>.json`` with ``--set``, ``eval-stored.json`` with
``--stored`` alone, ``eval-reference-twin.json`` or ``eval-reference-<DIR's name>.json`` with
``--reference``, followed by the settings).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.corpus import breakdown  # noqa: E402 -- after the repository root is on sys.path


def _analyze(args: tuple[str, str]) -> str:
    import torch

    from ckptscan.api import analyze
    from ckptscan.errors import CkptscanError

    run, out = args
    torch.set_num_threads(1)
    if (Path(out) / "summary.json").is_file():
        return "cached"
    try:
        analyze(run, out_dir=out, device="cpu", replay=False)
        return "ok"
    except CkptscanError as e:
        return f"error: {e}"


def rows_for(
    runs_dirs: list[Path], out: Path, jobs: int, params=None, stored: bool = False, reference_for=None
) -> list[tuple[dict, dict]]:
    from ckptscan.drills import evaluate

    runs = [r for d in runs_dirs for r in evaluate.find_runs(d)]
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise SystemExit("two runs share a folder name; score the parts separately")
    if not stored:  # with ``stored`` nothing is analysed: the rows come from the stored results
        with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
            todo = [(str(r), str(out / r.name)) for r in runs]
            for run, status in zip(runs, pool.map(_analyze, todo), strict=False):
                if status not in ("ok", "cached"):
                    print(f"{run.name}: {status}", file=sys.stderr)
    pairs = []
    for d in runs_dirs:
        for row in evaluate.evaluate(
            d,
            out_root=out,
            device="cpu",
            replay=False,
            params=params,
            stored=stored or reference_for is not None,
            reference_for=reference_for,
        ):
            pairs.append((row, json.loads((d / row["run"] / "truth.json").read_text())))
    return pairs


def _healthy(truth: dict) -> bool:
    """A healthy run: no fault and no benign event (the twin of its recipe's other runs)."""
    return truth["fault"] == "none" and truth.get("benign") is None


def _unseeded(recipe: str) -> str:
    """A recipe's name without its seed (``...-e25-s6806-full`` -> ``...-e25-full``)."""
    return re.sub(r"-s\d+(?=-|$)", "", recipe)


def reference_finder(runs_dirs: list[Path], out: Path, reference: str, reference_out: Path | None):
    """``evaluate``'s ``reference_for``: with ``"twin"``, a fault or benign run's healthy twin
    (its stored result under ``out``; healthy runs get none, and are left out); otherwise
    ``reference`` is a folder of healthy runs, analysed under ``reference_out``, and each run gets
    the one whose recipe is its own but for the seed (none: an error)."""
    from ckptscan.api import load_result
    from ckptscan.drills import evaluate
    from ckptscan.judge.verdict import Reference

    def healthy_in(dirs: list[Path]) -> dict[str, tuple[Path, dict]]:
        found: dict[str, tuple[Path, dict]] = {}
        for d in dirs:
            for run in evaluate.find_runs(d):
                truth = json.loads((run / "truth.json").read_text())
                if _healthy(truth):
                    if truth["recipe"] in found:
                        raise SystemExit(f"{run}: a second healthy run of recipe {truth['recipe']}")
                    found[truth["recipe"]] = (run, truth)
        return found

    if reference == "twin":
        twins = healthy_in(runs_dirs)

        def twin(run: Path, truth: dict):
            ref = twins.get(truth["recipe"], (None, None))[0]
            if ref is None or ref == run:
                return None
            return Reference(load_result(out / ref.name).timeline, str(ref), str(out / ref.name))

        return twin
    if reference_out is None:
        raise SystemExit("--reference DIR needs --reference-out (where DIR's runs were analysed)")
    refs: dict[str, tuple[Path, dict]] = {}
    for k, v in healthy_in([Path(reference)]).items():
        if _unseeded(k) in refs:
            raise SystemExit(f"{v[0]}: a second healthy run of recipe {_unseeded(k)} under {reference}")
        refs[_unseeded(k)] = v

    def other_seed(run: Path, truth: dict):
        ref, ref_truth = refs.get(_unseeded(truth["recipe"]), (None, None))
        if ref is None:
            raise SystemExit(f"{run.name}: no run of its recipe under {reference}")
        if ref_truth["seed"] == truth["seed"]:
            raise SystemExit(f"{run.name}: {ref} has its seed: not a run of another seed (--reference twin?)")
        return Reference(
            load_result(reference_out / ref.name).timeline, str(ref), str(reference_out / ref.name)
        )

    return other_seed


def _params(settings: list[str], ap):
    import dataclasses

    from ckptscan.judge.detect import Params

    types = {f.name: type(getattr(Params(), f.name)) for f in dataclasses.fields(Params)}
    kw = {}
    for item in settings:
        key, _, value = item.partition("=")
        if key not in types:
            ap.error(f"--set {item}: not a detection parameter ({', '.join(types)})")
        kw[key] = value.lower() in ("1", "true", "yes") if types[key] is bool else types[key](value)
    return Params(**kw)


def confidence_table(rows: list[dict]) -> dict[str, tuple[int, int]]:
    table: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        if r.get("decision"):
            table[r["decision"]][0] += bool(r["class_right"])
            table[r["decision"]][1] += 1
    return {k: (v[0], v[1]) for k, v in sorted(table.items())}


CONFIDENCE_BINS = (0.9, 0.8, 0.5, 0.0)  # lower edges: [0.9, 1], [0.8, 0.9), [0.5, 0.8), [0, 0.5)


def reliability(rows: list[dict]) -> list[tuple[float, float, int, int]]:
    """How often verdicts were right at each level of confidence: per ``CONFIDENCE_BINS`` bin
    (lower, upper, right verdicts, verdicts), the verdicts with a number for a confidence, the
    highest bin first; a bin that no verdict fell in is kept (0, 0).  The line the project's bar
    reads is the first bin (>= 0.9); the others say whether a lower confidence is also a lower
    hit rate, which a table counted on other parts need not give."""
    out = []
    upper = 1.0
    for lower in CONFIDENCE_BINS:
        inside = [
            r
            for r in rows
            if isinstance(r.get("confidence"), (int, float))
            and lower <= r["confidence"]
            and (r["confidence"] < upper or upper == 1.0)
        ]
        out.append((lower, upper, sum(bool(r["class_right"]) for r in inside), len(inside)))
        upper = lower
    return out


def misses(rows: list[dict]) -> dict:
    """Where the fault runs went wrong (``ckptscan eval`` rows): ``"read_as"``, per true class, the
    verdicts its runs got and how many ({class: {verdict: n}}, every fault run, detected or not);
    ``"missed"``, the fault runs not detected, by what their window (onset to divergence) held:
    ``"no checkpoint"`` (no checkpoint analysed there), ``"none examined"`` (checkpoints, none at
    or after the first examined step: only the rules read on checkpoints could find it),
    ``"examined"`` (at least one examined there), each {verdict: n}; a row with no window read
    (an error, no onset) under ``"unknown"``."""
    read_as: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    missed: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        if r["truth"] == "healthy":
            continue
        verdict = str(r.get("verdict"))
        read_as[r["truth"]][verdict] += 1
        if r.get("detected"):
            continue
        window = r.get("checkpoints_in_window")
        if window is None:
            where = "unknown"
        elif not window:
            where = "no checkpoint"
        else:
            where = "examined" if r.get("examined_in_window") else "none examined"
        missed[where][verdict] += 1
    return {
        "read_as": {k: dict(sorted(v.items())) for k, v in sorted(read_as.items())},
        "missed": {k: dict(sorted(v.items())) for k, v in missed.items()},
    }


HARM = 0.15  # nats: a fault run that did not diverge did harm where its final loss ended this far over
#              its healthy twin's (no benign event of the ten parts holdout20 to holdout29 moved it
#              0.15 either way: the largest, 0.141)


def harm(pairs: list[tuple[dict, dict]], margin: float = HARM) -> dict:
    """What each fault did to its run's loss, against its healthy twin (the run of the same recipe,
    ``truth["recipe"]``, with no fault and no benign event): per run name, ``"over"``, its final loss
    (``truth["final_loss"]``) less the twin's (None: no twin or no finite loss to compare), and
    ``"harmed"``, True where the run diverged or ended more than ``margin`` over the twin, False
    where it did neither, None where that cannot be told.  Benign runs get ``"over"`` too (their
    departure is the scale ``margin`` is read against); healthy runs are left out."""

    def finite(x) -> bool:
        return isinstance(x, (int, float)) and math.isfinite(x)

    twin: dict[str, float] = {}
    for row, truth in pairs:
        loss, recipe = truth.get("final_loss"), truth.get("recipe")
        if row["truth"] == "healthy" and not truth.get("benign") and recipe is not None and finite(loss):
            twin[str(recipe)] = float(loss)
    out: dict[str, dict] = {}
    for row, truth in pairs:
        benign = row["truth"] == "healthy" and bool(truth.get("benign"))
        if row["truth"] == "healthy" and not benign:
            continue
        loss, recipe = truth.get("final_loss"), truth.get("recipe")
        ref = twin.get(str(recipe)) if recipe is not None else None
        over = float(loss) - ref if (finite(loss) and ref is not None) else None
        if benign:
            harmed = None
        elif row.get("divergence") is not None:
            harmed = True
        else:
            harmed = None if over is None else over > margin
        out[row["run"]] = {"over": over, "harmed": harmed}
    return out


def _with_twins(pairs: list[tuple[dict, dict]], runs_dirs: list[Path]) -> list[tuple[dict, dict]]:
    """``pairs`` with the healthy runs of ``runs_dirs`` that have no row (``--reference twin``
    judges none) added as bare rows: ``harm`` reads their final loss."""
    from ckptscan.drills import evaluate

    have = {row["run"] for row, _ in pairs}
    out = list(pairs)
    for d in runs_dirs:
        for run in evaluate.find_runs(d):
            if run.name not in have:
                truth = json.loads((run / "truth.json").read_text())
                if evaluate.is_fault_free(truth):
                    out.append(({"run": run.name, "truth": "healthy"}, truth))
    return out


def harm_lines(pairs: list[tuple[dict, dict]], margin: float = HARM) -> list[str]:
    """``harm`` in words: the benign runs' largest departure from their twin, and detection apart
    for the fault runs that did harm and those that did not (none hidden: every fault run is in
    one of the three groups)."""
    h = harm(pairs, margin)
    rows = {row["run"]: row for row, _ in pairs}
    benign = [v["over"] for k, v in h.items() if rows[k]["truth"] == "healthy" and v["over"] is not None]
    lines = []
    if benign:
        lines.append(
            f"benign runs' final loss less their healthy twin's: {len(benign)} run{'s' if len(benign) != 1 else ''}, "
            f"largest departure {max(abs(x) for x in benign):.3f} nats (harm: more than {margin:g} over)"
        )
    fault = {k: v for k, v in h.items() if rows[k]["truth"] != "healthy"}
    for label, pick in (
        (f"did harm (diverged, or ended > {margin:g} nats over the twin)", True),
        (
            f"did no harm that was seen (did not diverge; ended at most {margin:g} nats over the twin, or under it)",
            False,
        ),
        ("harm not told (no twin or no final loss)", None),
    ):
        group = [rows[k] for k, v in fault.items() if v["harmed"] is pick]
        if not group and pick is None:
            continue
        examined = [r for r in group if r.get("examined_in_window")]
        by_class: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for r in group:
            by_class[r["truth"]][0] += bool(r.get("detected"))
            by_class[r["truth"]][1] += 1
        lines.append(
            f"fault runs that {label}: {sum(bool(r.get('detected')) for r in group)}/{len(group)} detected; "
            f"with a checkpoint examined in the window {sum(bool(r.get('detected')) for r in examined)}/"
            f"{len(examined)}; by class "
            + ", ".join(f"{c} {d}/{n}" for c, (d, n) in sorted(by_class.items()))
        )
    return lines


def interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a rate seen as ``k`` of ``n``: the rates under which
    seeing ``k`` or fewer, and ``k`` or more, each has a chance of at least (1 - ``level``) / 2.
    A part of 68 fault runs tells a rate only this closely: 57/68 is 73-92 %, and 0/65 false
    alarms is a rate of up to 5.5 %, not of none."""
    from scipy.stats import beta

    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= k <= n:
        raise ValueError(f"{k} of {n}: not a count out of {n}")
    a = (1.0 - level) / 2.0
    lo = 0.0 if k <= 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k >= n else float(beta.ppf(1.0 - a, k + 1, n - k))
    return (lo, hi)


def _share(k: int, n: int) -> str:
    """``k/n`` with its 95 % interval, in per cent."""
    lo, hi = interval(k, n)
    return f"{k}/{n} (95 % interval {100 * lo:.1f}-{100 * hi:.1f} %)"


def _counts(d: dict[str, int]) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(d.items(), key=lambda kv: (-kv[1], kv[0])))


def generated_with(truths: list[dict]) -> str:
    """The library versions and CPU kernel path the runs were trained with (``truth["versions"]``),
    each with its number of runs.  The same part trained on another CPU kernel path (AVX2 or
    AVX-512 kernels, another MKL) is other data: float differences grow over training, onsets stay
    but divergence steps and verdicts move.  A table is only comparable with one from the same."""
    seen: dict[str, int] = defaultdict(int)
    for t in truths:
        v = t.get("versions") or {}
        key = ", ".join(
            f"{k} {v[k]}" if k in v else f"{k} not recorded"
            for k in ("torch", "transformers", "cpu_capability")
        )
        if v.get("kernel_env"):  # the variables that forced MKL / oneDNN kernels, where set
            key += " (" + ", ".join(f"{k}={x}" for k, x in sorted(v["kernel_env"].items())) + ")"
        seen[key] += 1
    return "; ".join(f"{k} ({n} run{'s' if n != 1 else ''})" for k, n in sorted(seen.items()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--runs", type=Path, nargs="+", required=True, help="folders of runs (each with truth.json)"
    )
    ap.add_argument("--out", type=Path, required=True, help="analysis root (outside the repository)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--confidence", action="store_true", help="print the CONFIDENCE table these runs give")
    ap.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="judge again with this detection parameter (ckptscan.judge.detect.Params field)",
    )
    ap.add_argument(
        "--stored",
        action="store_true",
        help="analyse nothing: judge every run from its stored result under --out (the current "
        "rules, or --set); for a part whose weights were deleted to save disk, its logs and "
        "truth.json kept",
    )
    ap.add_argument(
        "--reference",
        metavar="twin|DIR",
        help="judge against a reference run (--baseline): 'twin' (each fault or benign run against its "
        "healthy twin) or a folder of healthy runs of the same recipes with other seeds",
    )
    ap.add_argument(
        "--reference-out", type=Path, help="where the --reference DIR runs were analysed (score.py --out)"
    )
    args = ap.parse_args(argv)
    from ckptscan.drills import evaluate

    params = _params(args.settings, ap) if args.settings else None
    finder = (  # references are loaded when asked for: rows_for analyses the runs first (unless --stored)
        reference_finder(args.runs, args.out, args.reference, args.reference_out)
        if args.reference is not None
        else None
    )
    pairs = rows_for(args.runs, args.out, args.jobs, params, stored=args.stored, reference_for=finder)
    rows = [r for r, _ in pairs]
    if args.reference == "twin":  # a fault or benign run whose recipe has no healthy run gets no row
        judged = {r["run"] for r in rows}
        left = sorted(
            run.name
            for d in args.runs
            for run in evaluate.find_runs(d)
            if run.name not in judged and not _healthy(json.loads((run / "truth.json").read_text()))
        )
        if left:
            print(f"left out, no healthy twin: {len(left)} run(s): {', '.join(left)}", file=sys.stderr)
    twins = _with_twins(pairs, args.runs)  # the healthy twins a reference judgement leaves out
    harmed = harm(twins)  # the loss against the healthy twin
    for r in rows:
        h = harmed.get(r["run"]) or {"over": None, "harmed": None}
        r["loss_over_twin"], r["harmed"] = h["over"], h["harmed"]
    args.out.mkdir(parents=True, exist_ok=True)
    settings = f"-{'-'.join(sorted(args.settings))}" if args.settings else ""
    name = (
        f"eval-reference-{'twin' if args.reference == 'twin' else Path(args.reference).name}{settings}.json"
        if args.reference is not None
        else f"eval{settings}.json"
        if params is not None
        else "eval-stored.json"
        if args.stored
        else "eval.json"
    )
    (args.out / name).write_text(
        json.dumps({"rows": rows, "totals": evaluate.totals(rows)}, indent=1, default=str)
    )
    t = evaluate.totals(rows)
    fault = [r for r in rows if r["truth"] != "healthy"]
    clean = [r for r in rows if r["truth"] == "healthy"]
    print(f"runs {t['runs']}: healthy/benign {len(clean)}, fault {len(fault)}")
    print(f"generated with: {generated_with([truth for _, truth in pairs])}")
    print(
        f"false alarms: {_share(sum(bool(r['false_alarm']) for r in clean), len(clean))} healthy/benign runs, "
        f"{sum(r['false_alarm'] for r in fault)}/{len(fault)} fault runs dated before their onset"
    )
    print(f"fault runs detected (at/after onset, before divergence): {_share(t['detected'], len(fault))}")
    print(
        f"  of the {t['detectable']} with a checkpoint analysed at/after the onset and before the divergence: "
        f"{t['detected_of_detectable']} detected (the others no reading of the checkpoints can find in time"
        + (f"; {t['window_unknown']} with no window read: errors, or no onset" if t["window_unknown"] else "")
        + ")"
    )
    print(
        f"  of the {t['examined_in_window']} with a checkpoint in that window at/after the first examined step: "
        f"{t['detected_of_examined']} detected (before it only the rules read on checkpoints: jump, depth, rise, fall)"
    )
    for line in harm_lines(twins):
        print("  " + line)
    m = misses(rows)
    for where in ("no checkpoint", "none examined", "examined", "unknown"):
        if where in m["missed"]:
            got = m["missed"][where]
            print(f"  not detected, window with {where}: {sum(got.values())} ({_counts(got)})")
    print(
        "fault runs read as (true class: verdicts): "
        + "; ".join(f"{k}: {_counts(v)}" for k, v in m["read_as"].items())
    )
    print(
        f"class right: {_share(sum(bool(r['class_right']) for r in fault), len(fault))} fault runs, "
        f"{t['class_right']}/{t['runs']} runs; inconclusive {t['inconclusive']}, errors {t['errors']}"
    )
    print(
        f"median lead over the log-only rule (diverged fault runs), the rule read by its first alarm: "
        f"{t['median_lead_over_log_only_first']}; by its first alarm at/after the onset: "
        f"{t['median_lead_over_log_only']}"
    )
    conf_lead = evaluate.median(
        [r["confirmed_lead_time"] for r in fault if r.get("confirmed_lead_time") is not None]
    )
    print(
        f"alarm confirmed before the divergence: {t['confirmed_before_divergence']}/{t['diverged']} diverged "
        f"(median confirmed lead {'-' if conf_lead is None else f'{conf_lead:g}'} steps)"
    )
    noted = [r for r in rows if r.get("uncounted_jump") is not None]
    listed = ", ".join(f"{r['run']} [{r['verdict']}, step {r['uncounted_jump']}]" for r in noted)
    print(
        f"step-size jumps reported, not counted (uncounted_jump): {sum(r['truth'] == 'healthy' for r in noted)}/"
        f"{len(clean)} healthy/benign runs, {sum(r['truth'] != 'healthy' for r in noted)}/{len(fault)} fault runs"
        f" ({listed or 'none'})"
    )
    print()
    print(breakdown.format_tables(pairs))
    table = confidence_table(rows)
    print("decision path                 right / verdicts   confidence now")
    from ckptscan.judge.classify import confidence

    for path, (right, n) in table.items():
        print(f"{path:28s}  {right:>5} / {n:<8}  {confidence(path):.2f}")
    sure = [r for r in rows if isinstance(r.get("confidence"), (int, float)) and r["confidence"] >= 0.9]
    print(
        f"verdicts with confidence >= 0.9: {_share(sum(bool(r['class_right']) for r in sure), len(sure))} right"
    )
    print(
        "right by confidence: "
        + ", ".join(
            f"[{lo:.1f}, {hi:.1f}{']' if hi == 1.0 else ')'} {k}/{n}"
            + (f" ({100 * k / n:.1f} %)" if n else "")
            for lo, hi, k, n in reliability(rows)
        )
    )
    if args.confidence:
        print("\nCONFIDENCE = " + json.dumps(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
