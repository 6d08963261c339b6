"""The Ray executor: one Ray task per checkpoint part (``executors.analyze_unit``).

The driver (this process) plans in step order exactly as the local loop walks: each checkpoint is
opened (headers only), its stored part reused when its identity matches, and the rest become
tasks, each given the checkpoint before it.  Finished parts stream back and are written into the
store as they complete (so a killed driver resumes: those parts are reused next time).  A task
that dies for an infrastructure reason (a worker or node lost) is retried by Ray
(``MAX_RETRIES``); a checkpoint that cannot be read comes back as its reason, as the local executor
gives it.  When one fails, the checkpoint after it is analysed again against the last good one
(the local loop's previous checkpoint), so the parts are the ones the local executor writes.

``ray`` is imported here only (the ``ckptscan[ray]`` extra).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ckptscan.discover.checkpoints import Checkpoint, Skipped
from ckptscan.errors import InputError, UsageError
from ckptscan.pipeline.analyzer import Analyzer, CheckpointResult, Options, _reason
from ckptscan.pipeline.executors import Progress, Run, UnitResult, analyze_unit, store_unit
from ckptscan.replay.contract import ReplayFile, find_replay

MAX_RETRIES = 3  # per task, for system failures only (a dead worker or node); never for bad input


def _ray():
    try:
        import ray
    except ImportError:
        raise UsageError(
            '--executor ray needs Ray: pip install "ckptscan[ray]" (or any ray >= 2.9)'
        ) from None
    return ray


def run_ray(
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
    ray = _ray()
    started = False
    if not ray.is_initialized():
        kw: dict = {"include_dashboard": False, "log_to_driver": False}
        if address is None and not os.environ.get("RAY_ADDRESS"):
            # a local instance: as many task slots as --workers (default: the cores); its worker
            # processes import ckptscan from where this driver does
            kw["num_cpus"] = workers or os.cpu_count() or 1
            kw["runtime_env"] = {"env_vars": _pythonpath()}
        ray.init(address=address, **kw)
        started = True
    try:
        return _drive(
            ray, run_dir, out_dir, checkpoints, options, on_progress, debug, workers, device_request
        )
    finally:
        if started:
            ray.shutdown()


def _pythonpath() -> dict[str, str]:
    import ckptscan

    root = str(Path(ckptscan.__file__).resolve().parent.parent)
    old = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": root if not old else f"{root}{os.pathsep}{old}"}


def _drive(ray, run_dir, out_dir, checkpoints, options, on_progress, debug, workers, device_request) -> Run:
    done = 0

    def progress(ck: Checkpoint, status: str) -> None:
        nonlocal done
        if on_progress:
            on_progress(done, ck, status)
        done += 1

    # -- plan: the local loop without the maths ----------------------------------------------
    an = Analyzer(run_dir, out_dir, options)
    slots: list[UnitResult] = []
    todo: list[UnitResult] = []
    try:
        for ck in checkpoints:
            before = an.prev.ckpt if an.prev is not None else None
            try:
                res = an.process(ck, compute=False)
            except UsageError:
                raise
            except Exception as e:  # noqa: BLE001 -- the containment boundary of a checkpoint
                if debug:
                    raise
                slots.append(UnitResult(ck, before, reason=_reason(e, ck)))
                progress(ck, "skipped")
                continue
            slot = UnitResult(ck, before, res)
            slots.append(slot)
            if res is None:
                todo.append(slot)
            else:
                progress(ck, "reused")
    finally:
        an.replay_checker.close()

    # -- the tasks ------------------------------------------------------------------------------
    gpu = options.device == "cuda" or (device_request == "auto" and ray.cluster_resources().get("GPU", 0) > 0)
    task_options = Options(**{**vars(options), "device": "cuda" if gpu else "cpu"})
    task = ray.remote(analyze_unit).options(
        num_cpus=1, num_gpus=1 if gpu else 0, max_retries=MAX_RETRIES, retry_exceptions=False
    )
    shared = (ray.put(run_dir), ray.put(task_options), ray.put(_reference_ids(run_dir, checkpoints, options)))
    window = workers or max(1, int(ray.cluster_resources().get("GPU" if gpu else "CPU", 1)))

    def submit(ck: Checkpoint, prev: Checkpoint | None):
        return task.remote(shared[0], shared[1], ck, prev, shared[2])

    def collect(slot: UnitResult, got: UnitResult) -> None:
        slot.result, slot.part, slot.reason = got.result, got.part, got.reason
        if got.part is not None:
            store_unit(out_dir, got)
        if debug and got.reason is not None:
            raise InputError(got.reason, got.ckpt.path)

    in_flight: dict = {}
    queue = list(todo)
    while queue or in_flight:
        while queue and len(in_flight) < window:
            slot = queue.pop(0)
            in_flight[submit(slot.ckpt, slot.prev)] = slot
        ready, _ = ray.wait(list(in_flight), num_returns=1)
        for ref in ready:
            slot = in_flight.pop(ref)
            collect(slot, _get(ray, ref, slot))
            progress(slot.ckpt, "skipped" if slot.reason is not None else "analysed")

    # -- a failed checkpoint: the next one is analysed against the last good one (as locally) --
    last_ok: Checkpoint | None = None
    for slot in slots:
        if slot.reason is not None:
            continue
        if slot.prev != last_ok:
            slot.prev = last_ok
            collect(slot, _get(ray, submit(slot.ckpt, last_ok), slot))
            if slot.reason is not None:
                continue
        last_ok = slot.ckpt

    results: list[CheckpointResult] = []
    skipped: list[Skipped] = []
    for slot in slots:
        if slot.reason is not None:
            skipped.append(Skipped(str(slot.ckpt.path), slot.reason))
        else:
            assert slot.result is not None
            results.append(slot.result)
            skipped.extend(slot.result.skipped)
    return results, skipped, an.layout_desc


def _get(ray, ref, slot: UnitResult) -> UnitResult:
    """A task's result; a task that failed for good (its retries spent: a worker killed by the
    kernel, say) is that checkpoint's reason, as the local loop's containment boundary gives it."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as e:
        cause = getattr(e, "cause", None)
        if isinstance(cause, UsageError):
            raise cause from None
        return UnitResult(slot.ckpt, slot.prev, reason=f"the worker failed: {type(e).__name__}")


def _reference_ids(run_dir: Path, checkpoints: list[Checkpoint], options: Options) -> np.ndarray | None:
    """The replay tokens every replay file must share: the first readable replay file's (the
    local loop's reference is the first checkpoint analysed with one)."""
    if not options.replay:
        return None
    for ck in checkpoints:
        path = find_replay(ck.path, ck.step, run_dir, options.replay_pattern)
        if path is None:
            continue
        try:
            with ReplayFile(path) as rf:
                return rf.input_ids()
        except Exception:  # noqa: BLE001, S112 -- a broken one is reported by its checkpoint's task
            continue
    return None
