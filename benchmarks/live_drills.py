"""In-loop monitor vs offline analysis on the fault drills: lead times side by side (docs/live.md).

Each drill (``ckptscan.drills.run_drill``, the fixtures' recipe: MoE, 1500 steps, onset 400,
checkpoints every 100 steps, float32 files) is trained with a ``Monitor`` attached through the
drill's ``callback``: a point every ``--every`` optimizer steps and an online detection pass every
``--detect-every`` points.  Afterwards the run's checkpoints are analysed offline
(``ckptscan.analyze``).  For each: the verdict (class, earliest step, confirmed step) and the lead
time over the loss divergence; for the in-loop monitor also the step at which its online detector
raised the alarm (``on_alarm``), and for the offline analysis the step of the checkpoint that
confirmed the alarm (the earliest an online reader of the checkpoints could have raised it).

    python benchmarks/live_drills.py OUT [--every 10] [--detect-every 10] [--only high-lr ...]

Prints a Markdown table and writes OUT/results.json.
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial
from pathlib import Path

from ckptscan import analyze
from ckptscan.callbacks import Monitor
from ckptscan.drills import run_drill
from ckptscan.drills.naming import config_json, hf_name

BASE = {
    "steps": 1500,
    "onset": 400,
    "save_every": 100,
    "naming": "mixtral",
    "replay": False,
    "dtype": "float32",
}
DRILLS = {
    "lowprec-attention": {"fault": "lowprec-attention", "severity": 1000.0},
    "lowprec-attention-1500": {"fault": "lowprec-attention", "severity": 1500.0},
    "high-lr": {"fault": "high-lr", "severity": 8.0},
    "combined": {"fault": "combined", "severity": 200.0, "lr_severity": 3.0},
    "healthy": {"fault": "none"},
    "benign-warmup-cut": {"fault": "none", "benign": "warmup-cut"},
}


def one(root: Path, name: str, every: int, detect_every: int) -> dict:
    run, live = root / name / "run", root / name / "live"
    holder: dict = {}
    alarms: list = []

    def callback(step, model, rec):
        if "m" not in holder:
            holder["m"] = Monitor(
                model,
                live,
                every=every,
                detect_every=detect_every,
                on_alarm=alarms.append,
                rename=partial(hf_name, naming=BASE["naming"]),
                config=config_json(model.cfg, BASE["naming"], BASE["dtype"]),
            )
        holder["m"].step(step, loss=rec["loss"], grad_norm=rec["grad_norm"])

    t0 = time.perf_counter()
    truth = run_drill(run, **BASE, **DRILLS[name], callback=callback)
    train_s = time.perf_counter() - t0
    mon = holder["m"]
    in_loop = mon.close()
    offline = analyze(run, out_dir=root / name / "offline", device="cpu", replay=False, command=[])
    div = truth["divergence_step"]

    def side(res) -> dict:
        v = res.verdict
        return {
            "class": v.get("fault_type"),
            "earliest": v.get("earliest_step"),
            "confirmed": v.get("confirmed_step"),
            "lead": res.summary.get("lead_time_steps"),
            "confirmed_lead": (div - v["confirmed_step"])
            if div is not None and v.get("confirmed_step")
            else None,
            "points": len(res.timeline.steps),
        }

    raised = alarms[0].step if alarms else None
    return {
        "drill": name,
        "divergence": div,
        "train_s": round(train_s, 1),
        "monitor_calls": len(mon.call_seconds),
        "monitor_s": round(sum(mon.call_seconds), 2),
        "in_loop": {
            **side(in_loop),
            "alarm_raised_at": raised,
            "raised_lead": (div - raised) if div is not None and raised is not None else None,
        },
        "offline": side(offline),
    }


def table(rows: list[dict]) -> str:
    out = [
        (
            "| drill | divergence | offline: class, earliest / confirmed (lead / confirmed lead) | in-loop: class, "
            "earliest / confirmed (lead / confirmed lead) | in-loop alarm raised at (lead) |"
        ),
        "|---|---|---|---|---|",
    ]
    for r in rows:

        def fmt(s):
            return f"{s['class']}, {s['earliest']} / {s['confirmed']} ({s['lead']} / {s['confirmed_lead']})"

        il = r["in_loop"]
        out.append(
            f"| {r['drill']} | {r['divergence']} | {fmt(r['offline'])} | {fmt(il)} | "
            f"{il['alarm_raised_at']} ({il['raised_lead']}) |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--detect-every", type=int, default=10)
    ap.add_argument("--only", nargs="*", choices=sorted(DRILLS))
    a = ap.parse_args()
    rows = []
    for name in a.only or DRILLS:
        rows.append(one(a.out, name, a.every, a.detect_every))
        print(json.dumps(rows[-1]), flush=True)
    (a.out / "results.json").write_text(json.dumps(rows, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
