"""``Monitor(model, out_dir).step(step)``: the weight-side monitors from the live parameters.

Called after every optimizer step; every ``every`` steps it reads the model's q/k (fused qkv, QK-norm
gains) and router parameters where they live (no checkpoint written, no copy to the host), computes
the same series ``ckptscan analyze`` computes for a checkpoint, and writes them as one part file of
an in-loop store (``store.py``), which ``ckptscan report`` and the detector read like an analysis of
checkpoints.

Sameness with the offline analysis is by construction, not by a second implementation:

* the parameters are resolved into per-layer blocks by the layout machinery (``ckptscan.layouts``)
  from ``model.named_parameters()`` (names and shapes) and the model's config (head counts), exactly
  as a checkpoint's tensors are from their headers and ``config.json``;
* the values are computed by the pipeline's own per-checkpoint routine (``Analyzer._compute``): the
  same monitor functions, Gram blocks carried from one point to the next, the same overflow findings
  and NaN conventions;
* between points the monitor keeps, on the training device, a float32 copy of each layer's q/k
  blocks (``[H + G, h, d]`` per layer: what the increment ``dW`` needs) and of the routers, plus the
  small Gram blocks; offline, the previous checkpoint's tensors are re-read instead.

So on the same weights the in-loop and offline values agree to float rounding (tested); a checkpoint
saved in a lower precision than the training weights (bf16 files of a float32 run) differs by that
rounding.

Distributed training (``torch.distributed`` initialised): only rank 0 computes and writes.  Plain
DDP replicates the parameters, so the other ranks return at once.  Parameters that are DTensors
(FSDP2 ``fully_shard``, tensor parallel) are gathered one tensor at a time as each layer is read
(``DTensor.full_tensor``, a collective): every rank then takes part in the gathers in the same order
and only rank 0 keeps the result, so ``step`` must be called on every rank at the same steps (a
lockstep training loop does).  FSDP1 flat parameters cannot be resolved into heads: call ``step``
inside ``FSDP.summon_full_params(model, writeback=False)`` (docs/live.md).  The alarm flag of an
online detection pass is broadcast from rank 0, so every rank sees the same ``Alarm``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import IO, Any, Self, cast

import torch

from ckptscan import monitors
from ckptscan.errors import CkptscanError, LayoutError, UsageError
from ckptscan.layouts import resolve_layout
from ckptscan.layouts.base import Layout
from ckptscan.monitors.attention import Workspace
from ckptscan.pipeline.analyzer import ANALYSIS_VERSION, Analyzer
from ckptscan.readers.base import TensorInfo

from . import store

# Default interval in optimizer steps: from the per-call cost measured at 1B geometry
# (docs/performance.md, "In-loop monitor"); the reasoning and the assumed step time are there.
DEFAULT_EVERY = 100
# Online detection: one pass (assemble, detect, write summary.json) every this many points (at the
# steps that are multiples of every * detect_every).
DEFAULT_DETECT_EVERY = 10


@dataclass
class Alarm:
    """What ``on_alarm`` receives, once, at the first detection pass that finds the run anomalous."""

    step: int  # the optimizer step at which the in-loop detector raised it
    verdict: dict  # the verdict (fault_type, earliest_step, confirmed_step, evidence, ...)
    out_dir: Path
    control: Any = None  # the HF TrainerControl / Lightning Trainer when a callback raised it
    context: dict = field(default_factory=dict)  # the callback's arguments (HF: optimizer, lr_scheduler, ...)
    actions: list[str] = field(default_factory=list)  # what the callback did (stop, save)


def rank_and_world() -> tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _is_dtensor(t) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - builds without distributed
        return False
    return isinstance(t, DTensor)


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside DDP/FSDP1 (``.module``) and torch.compile (``._orig_mod``) wrappers."""
    seen = set()
    while id(model) not in seen:
        seen.add(id(model))
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if isinstance(inner, torch.nn.Module):
            model = inner
    return model


def model_config(model: torch.nn.Module) -> dict | None:
    """The config dict of an HF model (``model.config.to_dict()``): the model's own, or that of the
    first submodule that has one (an HF model inside a LightningModule); None without one."""
    for m in (_unwrap(model), *model.modules()):
        cfg = getattr(m, "config", None)
        if isinstance(cfg, dict):
            return cfg
        to_dict = getattr(cfg, "to_dict", None)
        if callable(to_dict):
            return to_dict()
    return None


def _refuse_partitioned(params: dict[str, torch.nn.Parameter]) -> None:
    """A clear error for parameters that exist only as shards no layout can resolve into heads:
    FSDP1's flat parameters (``..._flat_param``, outside ``summon_full_params``) and DeepSpeed
    ZeRO-3's partitioned ones (``ds_numel`` set, an empty local tensor, outside a gather)."""
    flat = [n for n in params if n.endswith("_flat_param") or "._flat_param" in n]
    if flat:
        raise LayoutError(
            f"FSDP1 flat parameters ({flat[0]}): the heads cannot be read from them; call the monitor's "
            "step inside FSDP.summon_full_params(model, writeback=False), construct it there too, or "
            "shard with FSDP2 (fully_shard) instead (docs/live.md, 'DDP, FSDP')"
        )
    zero3 = [n for n, p in params.items() if hasattr(p, "ds_numel") and p.numel() == 0]
    if zero3:
        raise LayoutError(
            f"DeepSpeed ZeRO-3 partitioned parameters ({zero3[0]}): the heads cannot be read from the "
            "local shards; monitor inside deepspeed.zero.GatheredParameters(model.parameters()), or "
            "analyse the checkpoints offline (docs/live.md, 'DDP, FSDP')"
        )


class ParamSource:
    """A model's parameters seen as a ``TensorSource``: names (optionally renamed), shapes and dtypes
    from the parameters, ``read`` returns the live tensor (detached; a DTensor gathered)."""

    path = Path("<in-loop>")
    format = "in-loop"

    def __init__(self, model: torch.nn.Module, rename: Callable[[str], str] | None = None):
        self.params: dict[str, torch.nn.Parameter] = {}
        self._infos: dict[str, TensorInfo] = {}
        for name, p in model.named_parameters():
            n = rename(name) if rename is not None else name
            self.params[n] = p
            self._infos[n] = TensorInfo(n, tuple(p.shape), str(p.dtype).removeprefix("torch."), "<in-loop>")
        self.sharded = any(_is_dtensor(p) for p in self.params.values())
        _refuse_partitioned(self.params)

    def infos(self) -> dict[str, TensorInfo]:
        return self._infos

    def read(self, name: str) -> torch.Tensor:
        p = self.params[name]
        return (cast(Any, p).full_tensor() if _is_dtensor(p) else p).detach()

    def close(self) -> None:
        pass


class _Blocks:
    """One point's blocks of every registered monitor family for ``Analyzer._compute`` (the
    interface of the pipeline's ``_Weights``).  ``live``: read from the parameters, each block's
    float32 copy kept as the next point's snapshot; otherwise the snapshot of the previous point."""

    def __init__(self, layout: Layout, read=None, device: torch.device | None = None):
        self._blocks = {
            fam.name: {(fam.prefix_of(b), b.layer): b for b in fam.blocks(layout)}
            for fam in monitors.FAMILIES
        }
        self._read, self._device = read, device
        self.kept: dict[tuple, tuple] = {}

    def load(self, family: monitors.Family, prefix: str, layer: int) -> tuple | None:
        key = (family.name, prefix, layer)
        if self._read is None:
            return self.kept.get(key)
        b = self._blocks.get(family.name, {}).get((prefix, layer))
        if b is None:
            return None
        now = tuple(
            None if x is None else x.to(self._device, torch.float32) for x in family.load(b, self._read)
        )
        # a float32 parameter's block is a view of the live weights: the snapshot must be a copy
        self.kept[key] = tuple(None if x is None else x.clone() for x in now)
        return now

    def snapshot(self) -> _Blocks:
        snap = _Blocks.__new__(_Blocks)
        snap._blocks, snap._read, snap._device = self._blocks, None, None
        snap.kept = self.kept
        return snap


class Monitor:
    """In-loop monitoring of one model; see the module docstring and docs/live.md.

    ``every``: compute every this many optimizer steps (``step % every == 0``).  ``device``: where to
    compute (default: the device of the parameters).  ``detect``: run the detector online every
    ``detect_every`` points (at the steps that are multiples of ``every * detect_every``, so across
    a resume too) and call ``on_alarm(Alarm)`` once per process, at the first pass that finds the
    run anomalous.  The training log is flushed to the store at every point.  ``config``: the model
    config (default: an HF model's ``model.config``; needed for head counts where shapes do not tell
    them).  ``rename``: parameter name -> the name a
    checkpoint of this model would use (models whose module names no layout family knows).
    ``layout_file``: a layout TOML (docs/layouts.md).  ``log_file``: the training log to judge the
    loss curve from, when the loop does not pass ``loss`` to ``step``.  ``name``: what the store says
    it monitors (default: the model's class name); a store is resumed only by the same name.
    ``projections``: also compute the output projections' step size (``out.update_ratio``), so that
    the detector reads every rule it reads offline; it keeps a float32 copy of every layer's output
    projection on the device between points (``4 H h d`` bytes a layer), which is why it is off by
    default.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        out_dir: str | Path,
        every: int = DEFAULT_EVERY,
        *,
        device: str | torch.device | None = None,
        on_alarm: Callable[[Alarm], Any] | None = None,
        detect: bool = True,
        detect_every: int = DEFAULT_DETECT_EVERY,
        config: dict | None = None,
        rename: Callable[[str], str] | None = None,
        layout_file: str | Path | None = None,
        log_file: str | Path | None = None,
        name: str | None = None,
        projections: bool = False,
    ):
        if every < 1 or detect_every < 1:
            raise ValueError("every and detect_every must be >= 1")
        self.model, self.out_dir, self.every = model, Path(out_dir), int(every)
        self.detect, self.detect_every, self.on_alarm = detect, int(detect_every), on_alarm
        self.rank, self.world = rank_and_world()
        self.src = ParamSource(model, rename)
        cfg = config if config is not None else model_config(model)
        # by default no output projections in the loop: their step size would keep another d x H*h
        # float32 copy per layer on the training device; the detector then does without the rules
        # that read them (docs/detection.md, docs/live.md)
        layout = resolve_layout(self.src.infos(), cfg, layout_file)
        self.layout = layout if projections else dataclasses.replace(layout, projections=[])
        first = next(iter(self.src.params.values()), None)
        dev = device if device is not None else (first.device if first is not None else "cpu")
        self.device = torch.device(dev)
        self.name = name or type(_unwrap(model)).__name__
        self.log_file = None if log_file is None else str(Path(log_file).resolve())
        self.alarm: Alarm | None = None
        self.call_seconds: list[float] = []  # wall time of each computed point (docs/performance.md)
        self._engine = SimpleNamespace(prev=None, workspace=Workspace())  # what _compute reads of self
        self._prev: _Blocks | None = None
        self._prev_step: int | None = None
        self._last_step: int | None = None
        self._points: dict[int, tuple] = {}
        self._computed = 0
        self._log: IO[str] | None = None
        if self.rank == 0:
            before, owner = store.read_owner(self.out_dir) or {}, self._owner()
            store.claim(self.out_dir, owner)
            changed = [k for k in ("every", "layout") if k in before and before[k] != owner[k]]
            if changed and before.get("run") == owner["run"]:
                msg = (
                    f"ckptscan: {self.out_dir}: this run's {' and '.join(changed)} differ from those its "
                    "store's earlier points were computed with (projections on or off, another interval); "
                    "they are kept, and a series one attempt lacks is NaN at its points"
                )
                warnings.warn(msg, RuntimeWarning, stacklevel=2)
                logging.getLogger("ckptscan").warning(msg)
            self._points = {s: (s, v, f, src) for s, v, f, src in store.read_points(self.out_dir)}

    # -- the loop's calls ----------------------------------------------------------------------------
    def step(
        self, step: int, loss: float | None = None, grad_norm: float | None = None, lr: float | None = None
    ) -> dict | None:
        """Call after every optimizer step with the number of optimizer steps taken so far.  Records
        ``loss``/``grad_norm``/``lr`` (when given) in the store's log; at a multiple of ``every``
        computes the point.  Returns the point's values (rank 0), else None."""
        step = int(step)
        self.record(step, loss, grad_norm, lr)
        if step % self.every or step == self._last_step:
            return None
        self._last_step = step
        if self.rank != 0:
            if self.src.sharded:
                self._join_gathers()
            self._computed += 1
            if self._detects_at(step):
                self._sync_alarm(None, step)
            return None
        t0 = time.perf_counter()
        values = self._compute(step)
        self.call_seconds.append(time.perf_counter() - t0)
        self._computed += 1
        if self._detects_at(step):
            self.run_detection(step)
        else:
            self._flush_log()  # the loss so far is on disk at every point (a killed loop keeps it)
        return values

    def _detects_at(self, step: int) -> bool:
        """A detection pass at every ``detect_every``-th multiple of ``every`` in the run's own
        steps: the same steps on every rank and across a resume (the count of points a process
        computed would start again at each restart)."""
        return self.detect and (step // self.every) % self.detect_every == 0

    def start(self, step: int) -> None:
        """The model's weights are those of ``step``: a run resumed from the checkpoint saved at it,
        just loaded.  They become the previous point, so the first point computed after them has its
        increment (without this call it has none, as the first checkpoint of an analysis has none).
        The store's points after ``step`` (an earlier attempt got further) are dropped, with the
        summary that judged them, and computed again as the run gets there; its point at ``step`` is
        kept where there is one, else one is computed there (without an increment), so that every
        point's increment spans the steps from the point before it.  Call it on every
        rank, before the first ``step`` of the resumed loop (both callbacks do): with sharded
        parameters it gathers them, as ``step`` does."""
        step = int(step)
        self._last_step = step  # on every rank: a step(S) that follows is skipped by all alike
        if self.rank != 0:
            if self.src.sharded:
                self._join_gathers()
            return
        if self._drop_points(after=step):  # the summary judged them: ``ckptscan report`` judges again
            store.forget_summary(self.out_dir)
        self._prev, self._prev_step, self._engine.prev = None, None, None
        if step in self._points:  # the earlier attempt's point: the same weights, with its increment
            self._read(step)
        else:
            self._compute(step)

    def record(self, step: int, loss=None, grad_norm=None, lr=None) -> None:
        """Append one line to the store's training log (``log.jsonl``, read as the loss curve)."""
        if self.rank == 0 and loss is not None:
            self._write_log(int(step), loss, grad_norm, lr)

    def run_detection(self, step: int | None = None):
        """Assemble the points so far, judge them, write timeline.h5 and summary.json, and raise the
        alarm (once) when the verdict is anomalous; returns the ``api.Result`` (rank 0)."""
        step = (self._last_step or 0) if step is None else step
        result = None
        verdict = None
        if self.rank == 0:
            self._flush_log()
            result = store.write_result(
                self.out_dir, self._sorted_points(), command=["ckptscan.callbacks.Monitor"]
            )
            verdict = result.verdict if result.anomalous else None
        self._sync_alarm(verdict, step)
        return result

    def close(self):
        """The final detection pass (summary.json and timeline.h5 for ``ckptscan report``)."""
        result = self.run_detection() if self.rank == 0 or self.world > 1 else None
        if self._log is not None:
            self._log.close()
            self._log = None
        return result

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------------------
    def _owner(self) -> dict:
        return {
            "run": f"in-loop:{self.name}",
            "selection": {"steps": None, "every": None, "step_regex": None},
            "source": store.SOURCE_IN_LOOP,
            "every": self.every,
            "layout": self.layout.describe(),
            "device": str(self.device),
            "log_file": self.log_file,
        }

    def _compute(self, step: int) -> dict:
        if self._prev_step is None or step <= self._prev_step:
            # the first point of this process: a point of an earlier attempt at or after it (a run
            # resumed from an older checkpoint) is replaced, not mixed in
            self._drop_points(after=step - 1)
            self._prev, self._prev_step, self._engine.prev = None, None, None
        identity = {"version": ANALYSIS_VERSION, "every": self.every, "prev_step": self._prev_step}
        values, findings = self._read(step)
        store.write_point(self.out_dir, step, values, findings, identity)
        self._points[step] = (step, values, findings, store.SOURCE_IN_LOOP)
        return values

    def _read(self, step: int) -> tuple[dict, list]:
        """The point's values and findings from the live parameters (the increment from the previous
        point's snapshot, where there is one), which become the next point's previous one."""
        live = _Blocks(self.layout, self.src.read, self.device)
        with torch.no_grad():
            # a stand-in for the Analyzer and its weight readers (duck-typed): the same computation on live tensors
            values, findings, kept = Analyzer._compute(self._engine, live, self.layout, self._prev, step)  # type: ignore[arg-type]
        self._prev, self._prev_step = live.snapshot(), step
        self._engine.prev = SimpleNamespace(kept=kept)
        return values, findings

    def _drop_points(self, after: int) -> list[int]:
        """Delete the store's points after step ``after`` (an earlier attempt's); returns their steps."""
        later = [s for s in self._points if s > after]
        for s in later:
            del self._points[s]
            store.part_path(self.out_dir, s).unlink(missing_ok=True)
        return later

    def _join_gathers(self) -> None:
        """A rank other than 0 with sharded parameters: take part in rank 0's gathers, in its order
        (every registered family's blocks, family by family), and drop the results."""
        with torch.no_grad():
            for fam in monitors.FAMILIES:
                for b in fam.blocks(self.layout):
                    fam.load(b, self.src.read)

    def _sync_alarm(self, verdict: dict | None, step: int) -> None:
        if self.world > 1:
            box = [verdict]
            torch.distributed.broadcast_object_list(box, src=0)
            verdict = box[0]
        if verdict is not None and self.alarm is None:
            self.alarm = Alarm(step, verdict, self.out_dir)
            self._raise(self.alarm)

    def _raise(self, alarm: Alarm) -> None:
        if self.on_alarm is not None:
            self.on_alarm(alarm)

    def _sorted_points(self) -> list[tuple]:
        return [self._points[s] for s in sorted(self._points)]

    def _write_log(self, step: int, loss, grad_norm, lr) -> None:
        if self._log is None:
            self._log = open(self.out_dir / store.LOG_FILE, "a", encoding="utf-8")  # noqa: SIM115 -- kept open
        rec = {"step": step, "loss": _num(loss)}
        if grad_norm is not None:
            rec["grad_norm"] = _num(grad_norm)
        if lr is not None:
            rec["lr"] = _num(lr)
        self._log.write(json.dumps(rec) + "\n")

    def _flush_log(self) -> None:
        if self._log is not None:
            self._log.flush()


def open_for_callback(strict: bool, *args, **kwargs) -> Monitor | None:
    """A callback's ``Monitor(*args, **kwargs)``; where it cannot monitor this model or folder (a
    ``CkptscanError``: parameters no layout resolves, FSDP1 flat or ZeRO-3 partitioned ones, a
    folder that holds another run) and not ``strict``, a warning that names why, and None: the
    training goes on unmonitored rather than stopping.  Under ``torch.distributed`` the ranks agree
    first (a folder is claimed on rank 0 alone): where any rank failed, every rank is off (or, with
    ``strict``, raises), so that none is left waiting in a gather or a broadcast."""
    monitor, error = None, None
    try:
        monitor = Monitor(*args, **kwargs)
    except CkptscanError as e:
        error = e
    failed = _first_failure(None if error is None else str(error))
    if failed is None:
        return monitor
    if strict:
        raise (
            error
            if error is not None
            else UsageError(f"in-loop monitoring failed on rank {failed[0]}: {failed[1]}")
        )
    where = "" if error is not None else f" (on rank {failed[0]})"
    msg = f"ckptscan: in-loop monitoring is off for this run{where}: {failed[1]}"
    warnings.warn(msg, RuntimeWarning, stacklevel=3)
    logging.getLogger("ckptscan").warning(msg)
    return None


def _first_failure(mine: str | None) -> tuple[int, str] | None:
    """(rank, error) of the first rank whose monitor could not be opened, None where none failed;
    this rank's own alone outside ``torch.distributed``."""
    rank, world = rank_and_world()
    if world == 1:
        return None if mine is None else (rank, mine)
    errors: list[str | None] = [None] * world
    torch.distributed.all_gather_object(errors, mine)
    return next(((r, e) for r, e in enumerate(errors) if e is not None), None)


def _num(x) -> float | None:
    """A float for the log (a tensor's item), None for NaN/Inf (a JSON null: non-finite)."""
    v = float(x.item() if isinstance(x, torch.Tensor) else x)
    return v if math.isfinite(v) else None
