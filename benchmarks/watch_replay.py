"""Replay finished drill runs checkpoint by checkpoint while ``ckptscan watch`` follows them, and put
watch's alarm beside the offline analysis of the same checkpoints (the table in docs/live.md).

For each run (a folder with ``truth.json``) under the given ``runs`` folders: a new, empty run folder
is made in a temporary directory, ``ckptscan watch`` is started on it in a subprocess, and the
run's checkpoints are copied in one at a time in step order (files copied, not their mtimes, so that
each checkpoint lands when it is copied), each with the training log up to its step, ``--interval``
seconds apart, as a trainer saving at that pace would.  When the last one has landed, watch stops
on ``--idle``.  Its status file gives the alarm (confirmed step, the step it had analysed up to,
seconds after that checkpoint landed); ``ckptscan.api.analyze`` on the original run gives the
offline verdict.

    python benchmarks/watch_replay.py /work/drillsets/heldout/runs --json results.json

Prints a Markdown table (and the rows as JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ckptscan.api import analyze
from ckptscan.discover.checkpoints import discover


def _copy_log(src: Path, dst: Path, step: int) -> None:
    log = src / "metrics.jsonl"
    if not log.is_file():
        return
    keep = [ln for ln in log.read_text().splitlines() if ln.strip() and json.loads(ln).get("step", 0) <= step]
    tmp = dst / ".metrics.jsonl.tmp"
    tmp.write_text("\n".join(keep) + "\n")
    tmp.replace(dst / "metrics.jsonl")  # a trainer appends; the watcher must never see a torn log here


def replay_one(run: Path, work: Path, interval: float, poll: float, idle: float) -> dict:
    truth = json.loads((run / "truth.json").read_text())
    ckpts, _ = discover(run)
    dst, out = work / run.name, work / f"{run.name}.out"
    dst.mkdir(parents=True)
    if (run / "config.json").is_file():
        shutil.copyfile(run / "config.json", dst / "config.json")
    status = out / "watch.json"
    cmd = [
        sys.executable,
        "-m",
        "ckptscan.cli",
        "watch",
        str(dst),
        "-o",
        str(out),
        "--poll",
        str(poll),
        "--idle",
        str(idle),
        "--nice",
        "0",
        "-q",
        "--fail-on",
        "never",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    landed: dict[int, float] = {}
    try:
        time.sleep(max(2.0, poll))  # watch is up before the first checkpoint lands
        for ck in ckpts:
            target = dst / ck.path.name
            if ck.path.is_dir():
                shutil.copytree(ck.path, target, copy_function=shutil.copyfile)
            else:
                shutil.copyfile(ck.path, target)
            _copy_log(run, dst, ck.step)
            landed[ck.step] = time.time()
            time.sleep(interval)
        proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    st = json.loads(status.read_text())
    alarm = st.get("alarm") or {}
    off = analyze(run, out_dir=work / f"{run.name}.offline", command=[]).verdict
    confirmed = alarm.get("confirmed_step")
    raised = alarm.get("raised_at")
    return {
        "run": run.name,
        "fault": truth["fault"],
        "onset": truth["onset_step"],
        "divergence": truth["divergence_step"],
        "save_every": truth["params"]["save_every"],
        "offline_class": off.get("fault_type"),
        "offline_earliest": off.get("earliest_step"),
        "offline_confirmed": off.get("confirmed_step"),
        "watch_class_at_alarm": alarm.get("fault_type"),
        "watch_earliest_at_alarm": alarm.get("earliest_step"),
        "watch_confirmed": confirmed,
        "watch_analysed_up_to": alarm.get("analysed_up_to_step"),
        "watch_seconds_after_landing": alarm.get("seconds_after_landing"),
        "watch_raised_at": raised,
        "watch_final_class": (st.get("verdict") or {}).get("fault_type"),
        "watch_rounds": st.get("rounds"),
        "stop_reason": st.get("stop_reason"),
        "watch_exit_code": proc.returncode,
    }


def _cell(v) -> str:
    return "-" if v is None else str(v)


def table(rows: list[dict]) -> str:
    head = [
        "run",
        "fault",
        "onset",
        "divergence",
        "offline: class, earliest, confirmed",
        "watch: alarm at step (analysed up to)",
        "s after landing",
        "steps before divergence",
        "watch: class at alarm / at end",
    ]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in rows:
        off = f"{r['offline_class']}, {_cell(r['offline_earliest'])}, {_cell(r['offline_confirmed'])}"
        at = (
            "no alarm"
            if r["watch_confirmed"] is None
            else f"{r['watch_confirmed']} ({r['watch_analysed_up_to']})"
        )
        cls = f"{_cell(r['watch_class_at_alarm'])} / {_cell(r['watch_final_class'])}"
        div, conf = r["divergence"], r["watch_confirmed"]
        lead = div - conf if div is not None and conf is not None else None
        lines.append(
            "| "
            + " | ".join(
                [
                    r["run"],
                    r["fault"],
                    _cell(r["onset"] if r["fault"] != "none" else None),
                    _cell(r["divergence"]),
                    off,
                    at,
                    _cell(r["watch_seconds_after_landing"]),
                    _cell(lead),
                    cls,
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="folders holding drill runs (each with truth.json)")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between two checkpoints landing")
    ap.add_argument("--poll", type=float, default=0.2, help="watch --poll")
    ap.add_argument("--idle", type=float, default=3.0, help="watch --idle")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    runs = sorted(p.parent for root in args.runs for p in root.glob("*/truth.json"))
    if not runs:
        sys.exit("no drill runs (folders with truth.json) found")
    rows = []
    with tempfile.TemporaryDirectory(prefix="watch-replay-") as tmp:
        for run in runs:
            t = time.time()
            rows.append(replay_one(run, Path(tmp), args.interval, args.poll, args.idle))
            print(f"{run.name}: {time.time() - t:.0f}s", file=sys.stderr, flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
