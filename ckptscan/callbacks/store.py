"""The in-loop store: the same output folder ``ckptscan analyze`` writes, filled from a training loop.

Layout (``ckptscan/store/timeline.py`` for the formats)::

    <out>/parts/step_<step>.npz   one per in-loop point, written atomically by ``timeline.save_part``
                                  exactly as the pipeline writes a checkpoint's part; its ``meta``
                                  extra says ``"source": "in-loop"``
    <out>/run.json                the owner record ``ckptscan analyze`` keeps (``api.OWNER_FILE``), with
                                  ``"source": "in-loop"``, the interval, the layout and the log file
    <out>/log.jsonl               the loss (and grad norm) the loop reported, one JSON line per step
    <out>/timeline.h5, summary.json   assembled from the parts and judged (``write_result``): at every
                                  online detection pass, when the monitor is closed, and by
                                  ``ckptscan report OUT`` when parts are newer than summary.json

An analysis folder claimed by a run (``run.json`` naming it) is never written into, and ``ckptscan
analyze RUN -o OUT`` refuses a folder that holds an in-loop store (``api.claim_out_dir``: another run).
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from ckptscan import __version__
from ckptscan.errors import UsageError
from ckptscan.store.timeline import Timeline, assemble, atomic_write, load_part, make_dir, save_part

SOURCE_IN_LOOP = "in-loop"
SOURCE_CHECKPOINT = "checkpoint"
OWNER_FILE = "run.json"  # the same name as api.OWNER_FILE (api imports the pipeline: torch)
LOG_FILE = "log.jsonl"
PART_GLOB = "step_*.npz"


def read_owner(out: Path) -> dict | None:
    try:
        record = json.loads((Path(out) / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def is_live_store(out: str | Path) -> bool:
    """Whether ``out`` holds an in-loop store (its ``run.json`` says so)."""
    return (read_owner(Path(out)) or {}).get("source") == SOURCE_IN_LOOP


def claim(out: Path, record: dict) -> None:
    """Make ``out`` an in-loop store for ``record["run"]``; refuse a folder that holds an analysis of
    checkpoints or another in-loop run (a store is resumed by the run that made it)."""
    owner = read_owner(out)
    if owner is not None:
        if owner.get("source") != SOURCE_IN_LOOP:
            raise UsageError(
                f"{out} holds the analysis of {owner.get('run')}; an in-loop store needs a folder of its own"
            )
        if owner.get("run") != record["run"]:
            raise UsageError(
                f"{out} holds the in-loop store of {owner.get('run')!r}, not of "
                f"{record['run']!r}; choose another folder"
            )
    make_dir(out)
    atomic_write(out / OWNER_FILE, json.dumps(record))


def part_path(out: Path, step: int) -> Path:
    return Path(out) / "parts" / f"step_{step:012d}.npz"


def write_point(
    out: Path,
    step: int,
    values: dict[str, np.ndarray],
    findings: list[dict],
    identity: dict,
    source: str = SOURCE_IN_LOOP,
) -> None:
    """One point's part file, in the pipeline's format (``timeline.save_part``)."""
    meta = {"findings": findings, "skipped": [], "outside": [], "source": source}
    extra = {"meta": np.frombuffer(json.dumps(meta).encode(), np.uint8)}
    save_part(part_path(out, step), {**identity, "source": source}, values, extra=extra)


def read_points(out: Path) -> list[tuple[int, dict, list, str]]:
    """(step, values, findings, source) of every readable part, by step; unreadable ones are left out
    (a torn write of a killed loop is a temporary, never a part)."""
    points = []
    for p in sorted((Path(out) / "parts").glob(PART_GLOB)):
        try:
            step = int(p.stem.split("_", 1)[1])
            _ident, values, extras = load_part(p)
            meta = json.loads(bytes(extras["meta"]).decode()) if "meta" in extras else {}
        except (ValueError, KeyError):
            continue
        points.append((step, values, meta.get("findings", []), meta.get("source", SOURCE_CHECKPOINT)))
    return sorted(points, key=lambda x: x[0])


def assemble_points(points, owner: dict) -> Timeline:
    """The timeline of the points, with where each came from in its meta (``sources``)."""
    sources = [src for *_, src in points]
    meta = {
        "run": owner.get("run"),
        "layout": owner.get("layout"),
        "sources": sources,
        "every": owner.get("every"),
    }
    return assemble([s for s, *_ in points], [v for _, v, *_ in points], meta)


def source_counts(sources: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in sources:
        out[s] = out.get(s, 0) + 1
    return out


def write_result(out: str | Path, points=None, command: list[str] | None = None, params=None):
    """Assemble the store's points (``points`` when the caller holds them, else its part files),
    judge them with the detector ``ckptscan analyze`` uses, and write ``timeline.h5`` and
    ``summary.json``; returns the ``api.Result``.  The loss curve is the store's ``log.jsonl``, or the
    log file the monitor was given."""
    from ckptscan.api import SCHEMA, Result
    from ckptscan.judge.verdict import judge
    from ckptscan.report.data import outcome

    t0 = time.time()
    out = Path(out)
    owner = read_owner(out)
    if owner is None or owner.get("source") != SOURCE_IN_LOOP:
        raise UsageError(f"{out}: not an in-loop store (no run.json with source in-loop)")
    points = read_points(out) if points is None else points
    timeline = assemble_points(points, owner)
    findings = [f for _, _, fs, _ in points for f in fs]
    log_file = owner.get("log_file") or (str(out / LOG_FILE) if (out / LOG_FILE).is_file() else None)
    judgement = judge(out, timeline, findings, log_file=log_file, params=params)
    if not points:
        judgement["verdict"].update(
            fault_type="inconclusive",
            confidence=0.0,
            reason="not enough evidence: the store holds no point yet",
        )
    timeline.save(out / "timeline.h5")
    steps = [int(s) for s, *_ in points]
    summary = {
        "schema": SCHEMA,
        "ckptscan_version": __version__,
        "run": str(owner.get("run")),
        "out": str(out),
        "command": command if command is not None else list(sys.argv),
        "layout": owner.get("layout"),
        "device": owner.get("device", "?"),
        "checkpoints": {
            "analyzed": len(points),
            "reused": 0,
            "steps": steps,
            "skipped": [],
            "framework": None,
            "run_folder": None,
            "notes": [],
            "source": SOURCE_IN_LOOP,
            "sources": source_counts(timeline.meta["sources"]),
            "every": owner.get("every"),
        },
        "monitors": timeline.names(),
        "findings": findings,
        **judgement,
        "started_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "elapsed_s": round(time.time() - t0, 3),
    }
    summary["outcome"] = outcome(summary).as_dict()
    result = Result(out, out, summary, timeline, [])
    atomic_write(out / "summary.json", result.to_json())
    return result


def forget_summary(out: str | Path) -> None:
    """Remove the store's summary (its points changed without a new part: ``is_stale`` then says so)."""
    (Path(out) / "summary.json").unlink(missing_ok=True)


def is_stale(out: str | Path) -> bool:
    """An in-loop store whose summary is missing or older than its newest part (a loop killed
    between detection passes)."""
    out = Path(out)
    if not is_live_store(out):
        return False
    parts = list((out / "parts").glob(PART_GLOB))
    try:
        done = (out / "summary.json").stat().st_mtime_ns
    except OSError:
        return True
    return any(p.stat().st_mtime_ns > done for p in parts)
