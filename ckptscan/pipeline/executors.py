"""Executors: who runs the per-checkpoint unit of work (``AnalysisConfig.executor``).

The unit is one checkpoint and the previous analysed one -> that checkpoint's part file
(``analyze_unit``, a picklable function of plain values).  ``local`` runs the units in order in this
process (``analyzer.run_analysis``: the Gram blocks and routing decisions are carried from one
checkpoint to the next); ``ray`` (``pipeline/ray_executor.py``, imported only when chosen) runs them
as Ray tasks, each recomputing what its pair needs from the previous checkpoint's tensors.

Either way the driver alone writes the store: a worker returns the part (identity, values, extras)
and the driver writes it atomically as it arrives, so the output folder needs to be reachable only
from the driver, and a killed driver leaves whole parts that the next run reuses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ckptscan.config import EXECUTORS
from ckptscan.discover.checkpoints import Checkpoint, Skipped
from ckptscan.errors import UsageError
from ckptscan.pipeline.analyzer import Analyzer, CheckpointResult, Options, _reason, run_analysis
from ckptscan.store.timeline import save_part

Progress = Callable[[int, Checkpoint, str], None]
Run = tuple[list[CheckpointResult], list[Skipped], dict | None]


@dataclass
class UnitResult:
    """What a worker hands back for one checkpoint: its result and the part to store, or why it was
    skipped (the reason the local executor gives)."""

    ckpt: Checkpoint
    prev: Checkpoint | None
    result: CheckpointResult | None = None
    part: tuple[str, dict, dict, dict] | None = None  # name, identity, values, extra
    reason: str | None = None


def analyze_unit(
    run_dir: Path,
    options: Options,
    ckpt: Checkpoint,
    prev: Checkpoint | None,
    reference_ids: np.ndarray | None = None,
) -> UnitResult:
    """The unit of work: analyse ``ckpt`` after ``prev`` (None: the first), nothing written.  A
    problem of the checkpoint is returned as its reason (it is not an infrastructure failure, so
    nothing retries it); a ``UsageError`` (a wrong option: every checkpoint would fail) is raised."""
    an = Analyzer(run_dir, None, options)
    an.reference_ids = reference_ids
    try:
        if prev is not None:
            try:
                an.follow(prev)
            except UsageError:
                raise
            except Exception:  # noqa: BLE001 -- as the local loop's unreadable previous checkpoint
                an.prev = None
                return UnitResult(ckpt, prev, reason="previous checkpoint unreadable")
        try:
            res = an.process(ckpt)
        except UsageError:
            raise
        except Exception as e:  # noqa: BLE001 -- the containment boundary of a checkpoint
            return UnitResult(ckpt, prev, reason=_reason(e, ckpt))
        return UnitResult(ckpt, prev, res, an.last_part)
    finally:
        an.replay_checker.close()


def store_unit(out_dir: Path, unit: UnitResult) -> None:
    """Write a unit's part into the store (atomically: ``save_part``)."""
    assert unit.part is not None
    name, identity, values, extra = unit.part
    save_part(out_dir / "parts" / name, identity, values, extra=extra)


def run_local(
    run_dir: Path,
    out_dir: Path,
    checkpoints: list[Checkpoint],
    options: Options,
    on_progress: Progress | None = None,
    debug: bool = False,
    **_: object,
) -> Run:
    return run_analysis(run_dir, out_dir, checkpoints, options, on_progress, debug)


def run_ray(*args, **kwargs) -> Run:
    from ckptscan.pipeline.ray_executor import run_ray as run

    return run(*args, **kwargs)


REGISTRY: dict[str, Callable[..., Run]] = {"local": run_local, "ray": run_ray}
assert tuple(REGISTRY) == EXECUTORS


def run_with(
    executor: str,
    run_dir: Path,
    out_dir: Path,
    checkpoints: list[Checkpoint],
    options: Options,
    on_progress: Progress | None = None,
    debug: bool = False,
    *,
    address: str | None = None,
    workers: int | None = None,
    device_request: str = "auto",
) -> Run:
    """Analyse ``checkpoints`` with the named executor: (results in step order, skipped, layout)."""
    return REGISTRY[executor](
        run_dir,
        out_dir,
        checkpoints,
        options,
        on_progress,
        debug,
        address=address,
        workers=workers,
        device_request=device_request,
    )
