"""CPU against CUDA: the same runs analysed on both devices, monitor values and verdicts compared.

    python benchmarks/device_parity.py                      # the shipped fixtures
    python benchmarks/device_parity.py RUN [RUN ...] --json parity.json

Each run is analysed twice with ``ckptscan.analyze`` (``device="cpu"``, then ``device="cuda"``) into
a scratch folder, and the two results are compared:

- the verdict: anomalous, fault type, earliest and confirmed step, decision;
- every monitor series of the timeline: the same names and shapes, the same missing (NaN) cells, and
  the largest difference, absolute and relative to the series' largest magnitude;
- the wall time of each analysis (the CUDA one includes its first-use start-up).

Exits 1 when a verdict differs, a series is missing on one side, the NaN cells differ, or a relative
difference is over ``--rtol``; 2 when there is no CUDA device.  Not part of the test suite (CI has no
GPU): run it where one is.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
VERDICT_KEYS = ("anomalous", "fault_type", "earliest_step", "confirmed_step", "decision")


def default_runs() -> list[Path]:
    drills = sorted(p for p in (ROOT / "fixtures" / "drills").iterdir() if p.is_dir())
    return [*drills, ROOT / "fixtures" / "deepspeed" / "zero3-world2"]


def analyse(run: Path, out: Path, device: str) -> tuple[dict, dict[str, np.ndarray], float]:
    from ckptscan import analyze

    t = time.perf_counter()
    res = analyze(run, out_dir=out, device=device, command=["device_parity", device])
    took = time.perf_counter() - t
    verdict = {k: res.verdict.get(k) for k in VERDICT_KEYS}
    return verdict, dict(res.timeline.series), took


def compare_series(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict:
    rows = {}
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            rows[name] = {"problem": f"only on {'cpu' if name in a else 'cuda'}"}
            continue
        x, y = np.asarray(a[name], np.float64), np.asarray(b[name], np.float64)
        if x.shape != y.shape:
            rows[name] = {"problem": f"shapes {x.shape} and {y.shape}"}
            continue
        fx, fy = np.isfinite(x), np.isfinite(y)
        row: dict = {"cells": int(x.size), "finite": int(fx.sum())}
        if not np.array_equal(fx, fy):
            row["problem"] = f"{int((fx != fy).sum())} cells finite on one side only"
        both = fx & fy
        if both.any():
            diff = np.abs(x[both] - y[both])
            scale = float(np.max(np.abs(x[both])))
            row["max_abs"] = float(diff.max())
            row["max_rel"] = float(diff.max() / scale) if scale > 0 else 0.0
        rows[name] = row
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="*", type=Path, help="run folders (default: the shipped fixtures)")
    ap.add_argument("--rtol", type=float, default=1e-4, help="largest relative difference allowed")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("device_parity: no CUDA device here", file=sys.stderr)
        return 2
    runs = args.runs or default_runs()
    scratch = Path(tempfile.mkdtemp(prefix="ckptscan-parity-"))
    report: dict = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0),
        "rtol": args.rtol,
        "runs": {},
    }
    bad = 0
    try:
        for run in runs:
            v_cpu, s_cpu, t_cpu = analyse(run, scratch / "cpu" / run.name, "cpu")
            v_gpu, s_gpu, t_gpu = analyse(run, scratch / "cuda" / run.name, "cuda")
            series = compare_series(s_cpu, s_gpu)
            worst = max((r.get("max_rel", 0.0) for r in series.values()), default=0.0)
            worst_name = max(series, key=lambda n: series[n].get("max_rel", 0.0), default="")
            problems = {n: r["problem"] for n, r in series.items() if "problem" in r}
            same = v_cpu == v_gpu
            ok = same and not problems and worst <= args.rtol
            bad += not ok
            report["runs"][run.name] = {
                "ok": ok,
                "verdict_cpu": v_cpu,
                "verdict_cuda": v_gpu,
                "series": len(series),
                "worst_rel": worst,
                "worst_series": worst_name,
                "problems": problems,
                "cpu_s": round(t_cpu, 3),
                "cuda_s": round(t_gpu, 3),
                "by_series": series,
            }
            print(
                f"{'ok  ' if ok else 'DIFF'} {run.name:<22} verdict {'same' if same else 'DIFFERS'} "
                f"({v_cpu['fault_type']} @ {v_cpu['earliest_step']} | {v_gpu['fault_type']} @ "
                f"{v_gpu['earliest_step']}); {len(series)} series, worst rel {worst:.2e} ({worst_name}); "
                f"{len(problems)} problems; cpu {t_cpu:.2f} s, cuda {t_gpu:.2f} s"
            )
            for n, p in problems.items():
                print(f"     {n}: {p}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(f"{len(runs) - bad}/{len(runs)} runs agree within rtol {args.rtol:g}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
