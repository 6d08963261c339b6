"""The analysis loop: checkpoints in, per-checkpoint monitor values out (resumable, bounded memory).

For each checkpoint in step order: open it (lazily, memory-mapped), resolve its layout, and for one
block at a time read the q/k (and router) tensors of this checkpoint and of the previous analysed
one, compute the single-checkpoint monitors and the increment monitors, and write the checkpoint's
part file atomically.  The next block is read while the current one is computed.  Between
checkpoints only the small Gram blocks (H h^2 per layer) are kept, so memory is a few blocks'
tensors, whatever the number of checkpoints or layers.

A checkpoint whose part file exists with the same identity (its files' sizes and mtimes, the
previous checkpoint's identity, the analysis version) is not recomputed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ckptscan import monitors as registry
from ckptscan.discover.checkpoints import Checkpoint, Skipped
from ckptscan.errors import CkptscanError, InputError, ReplayError, UsageError, unexpected
from ckptscan.layouts import find_config, resolve_layout
from ckptscan.layouts.base import AttnBlock, Layout
from ckptscan.limits import BUDGET_ENV, memory_budget, size_text
from ckptscan.monitors import attention, names, router
from ckptscan.monitors.attention import Workspace
from ckptscan.monitors.numerics import nonfinite_count
from ckptscan.monitors.registry import BlockStep, Family
from ckptscan.pipeline.activations import ReplayState, activation_values, topk_by_layer
from ckptscan.readers import open_checkpoint
from ckptscan.readers._common import file_stat
from ckptscan.readers.remote import RemoteSafetensorsSource
from ckptscan.readers.torchfile import TorchSource
from ckptscan.replay.check import ReplayChecker
from ckptscan.replay.contract import find_replay
from ckptscan.store.timeline import load_part, save_part

# Bump when a monitor's definition changes: old part files are then recomputed.
ANALYSIS_VERSION = 3  # 2: float64 Gram products; 3: increments subtracted in float64 (float32-stored weights)


@dataclass
class Options:
    device: str = "cpu"
    trust_pickle: bool = False
    layout_file: Path | None = None
    replay: bool = True
    replay_pattern: str | None = None
    config_file: Path | None = None  # --config (an HF config.json)
    model_overrides: dict = field(default_factory=dict)  # --heads/--kv-heads as config keys
    run_folder: Path | None = (
        None  # the framework's run folder (a Lightning version_N), searched for config.json
    )


class _Weights:
    """One checkpoint's monitored tensors, read on demand (memory-mapped) and never held beyond a
    block: the activation stage and the increments re-read them instead of keeping a whole
    checkpoint's q/k in memory (a re-read from the page cache costs far less than the maths)."""

    def __init__(self, analyzer: Analyzer, src, layout: Layout):
        self._an = analyzer
        self._src = src
        # per family: (series prefix, layer) -> block
        self._blocks = {
            fam.name: {(fam.prefix_of(b), b.layer): b for b in fam.blocks(layout)}
            for fam in registry.FAMILIES
        }

    def block(self, family: Family, prefix: str, layer: int):
        return self._blocks.get(family.name, {}).get((prefix, layer))

    def load(self, family: Family, prefix: str, layer: int) -> tuple | None:
        """The tensors of ``family``'s block (``prefix``, ``layer``), float32 on the analysis device
        (None: this checkpoint has no such block)."""
        b = self.block(family, prefix, layer)
        return None if b is None else self._an._load(family, b, self._src)

    def attn(self, layer: int, name: str = "attn"):
        return self.load(attention.FAMILY, name, layer)

    def router(self, layer: int):
        return self.load(router.FAMILY, router.FAMILY.prefix_of(None), layer)

    def attn_block(self, layer: int, name: str = "attn") -> AttnBlock | None:
        return self.block(attention.FAMILY, name, layer)


@dataclass
class _Prev:
    """What the next checkpoint needs from this one: where it is (its tensors are re-read) and what
    each family's blocks kept (``BlockStep.keep``: the Gram blocks of attention layers, small: H h^2
    per layer), when they were computed."""

    ckpt: Checkpoint
    identity: dict
    kept: dict[tuple[str, str, int], object] = field(default_factory=dict)


@dataclass
class CheckpointResult:
    step: int
    values: dict[str, np.ndarray]  # name -> [L, K]
    findings: list[dict]
    reused: bool
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)  # e.g. a broken replay file
    outside: list[str] = field(default_factory=list)  # files read outside the run (symlinks, HDF5 external)


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available")
    return device


def checkpoint_config(ckpt_path: Path, src, run_dir: Path, opt: Options) -> tuple[dict | None, str | None]:
    """The checkpoint's model config and where it came from (``layouts.find_config``)."""
    hparams = src.hyper_parameters() if isinstance(src, TorchSource) else None
    return find_config(
        ckpt_path, run_dir, run_folder=opt.run_folder, config_file=opt.config_file, hparams=hparams
    )


def _weight_files(src) -> dict[str, Path]:
    """The files the checkpoint's tensors live in: name relative to the checkpoint -> path."""
    folder = Path(src.path)
    base = folder if folder.is_dir() else folder.parent
    return {
        rel: base / rel if not Path(rel).is_absolute() else Path(rel)
        for rel in sorted({info.file for info in src.infos().values()})
    }


def file_identity(src, config_path: str | None) -> dict:
    """Sizes and mtimes of every file the checkpoint's tensors live in (cheap, no hashing); at a URL,
    sizes and versions (ETag, else mtime) from the object storage's listing."""
    ident: dict[str, list | None] = {}
    if isinstance(src, RemoteSafetensorsSource):
        ident.update(src.identity())
    for rel, p in ({} if isinstance(src, RemoteSafetensorsSource) else _weight_files(src)).items():
        try:
            st = p.stat()
            ident[rel] = [st.st_size, st.st_mtime_ns]
        except OSError:
            ident[rel] = None
    if config_path is not None and Path(config_path).is_file():
        st = Path(config_path).stat()
        ident["<config>"] = [str(config_path), st.st_size, st.st_mtime_ns]
    return ident


class Analyzer:
    """Walks checkpoints in order, one at a time; see the module docstring."""

    def __init__(self, run_dir: Path, out_dir: Path | None, options: Options):
        """``out_dir`` None: nothing is stored or reused; ``process`` leaves the part it would write in
        ``last_part`` (an executor's worker: the driver writes it, ``pipeline/executors.py``)."""
        self.run_dir = run_dir
        self.parts_dir = out_dir / "parts" if out_dir is not None else None
        self.last_part: tuple[str, dict, dict, dict] | None = None  # name, identity, values, extra
        self.opt = options
        self.device = torch.device(options.device)
        self.workspace = Workspace()  # float64 copies of one block, reused block after block
        self.prev: _Prev | None = None
        self.replay_prev: ReplayState | None = None
        self.reference_ids: np.ndarray | None = None
        self.layout_desc: dict | None = None
        self.layout_key = None
        self.budget = memory_budget()  # per checkpoint (limits.py); a bad setting is a usage error here
        self.replay_checker = ReplayChecker()  # its worker process starts with the first replay file
        self._replay_checked: dict[Path, tuple[tuple[int, int], list[str]]] = {}  # file_stat, outside
        if self.parts_dir is not None:
            _remove_stale_temporaries(self.parts_dir)
        if options.layout_file is not None:
            self.layout_key = Path(options.layout_file).read_bytes().hex()[:64]

    # -- one checkpoint ---------------------------------------------------------------------
    def process(self, ckpt: Checkpoint, compute: bool = True) -> CheckpointResult | None:
        """Analyse one checkpoint (or reuse its stored part).  Raises CkptscanError on bad input.

        ``compute=False``: everything up to the maths (open, layout, the memory check, reuse), then
        None when the part must be computed; the checkpoint becomes the previous one either way (an
        executor's planning pass, ``pipeline/executors.py``)."""
        replay_path = (
            find_replay(ckpt.path, ckpt.step, self.run_dir, self.opt.replay_pattern)
            if self.opt.replay
            else None
        )
        with open_checkpoint(ckpt.path, trust_pickle=self.opt.trust_pickle) as src:
            config, config_path = checkpoint_config(ckpt.path, src, self.run_dir, self.opt)
            identity = {
                "version": ANALYSIS_VERSION,
                "files": file_identity(src, config_path),
                "replay": _stat_identity(replay_path),
                "layout_file": self.layout_key,
                "model_overrides": self.opt.model_overrides or None,
                "prev": self.prev.identity["files"] if self.prev else None,
                "prev_replay": self.prev.identity["replay"] if self.prev else None,
                "prev_step": self.prev.ckpt.step if self.prev else None,
            }
            part_name = f"step_{ckpt.step:012d}.npz"
            stored = self._try_reuse(self.parts_dir / part_name, identity) if self.parts_dir else None
            infos = src.infos()
            layout = resolve_layout(infos, config, self.opt.layout_file, self.opt.model_overrides)
            if config_path is not None:
                layout.notes.append(f"model config from {config_path}")
            if self.layout_desc is None:
                self.layout_desc = layout.describe()
            remote = isinstance(src, RemoteSafetensorsSource)  # at its URL: no local file to resolve
            outside = [] if remote else self._outside(_weight_files(src).values())
            if stored is not None and not _has_every_series(stored[0], layout):
                stored = None  # stored before a family registered now: computed again
            if stored is not None:
                return self._reused(ckpt, identity, replay_path, layout, outside, *stored)

            check_memory(layout, self.budget)
            if not compute:
                self.prev = _Prev(ckpt, identity)
                return None
            with self._open_prev() as prev_weights:
                weights = _Weights(self, src, layout)
                values, findings, kept = self._compute(weights, layout, prev_weights, ckpt.step)
                extras, skipped, external = self._activations(
                    replay_path, layout, weights, prev_weights, values
                )
            now = {"files": file_identity(src, config_path), "replay": _stat_identity(replay_path)}
            if any(now[k] != identity[k] for k in now):
                raise InputError(
                    "changed while it was being read (a save in progress?); it is analysed on the next run",
                    ckpt.path,
                )
            meta = {"findings": findings, "skipped": [x.as_dict() for x in skipped], "outside": external}
            extra = {"meta": np.frombuffer(json.dumps(meta).encode(), np.uint8), **extras}
            if self.parts_dir is not None:
                save_part(self.parts_dir / part_name, identity, values, extra=extra)
            else:
                self.last_part = (part_name, identity, values, extra)
            self.prev = _Prev(ckpt, identity, kept)
            return CheckpointResult(ckpt.step, values, findings, False, extras, skipped, outside + external)

    def follow(self, prev: Checkpoint) -> None:
        """Start after ``prev`` as if it had just been analysed here: its identity, and its replay
        state (the routing decisions the activation increments compare against) recomputed.  The
        attention increments then take the previous Grams from its weights, as after a resumed
        part (``BlockStep.carried`` is None).  An executor's worker runs one checkpoint this way."""
        replay_path = (
            find_replay(prev.path, prev.step, self.run_dir, self.opt.replay_pattern)
            if self.opt.replay
            else None
        )
        with open_checkpoint(prev.path, trust_pickle=self.opt.trust_pickle) as src:
            config, config_path = checkpoint_config(prev.path, src, self.run_dir, self.opt)
            self.prev = _Prev(
                prev, {"files": file_identity(src, config_path), "replay": _stat_identity(replay_path)}
            )
            if replay_path is None:
                return
            try:
                layout = resolve_layout(src.infos(), config, self.opt.layout_file, self.opt.model_overrides)
                self._checked_replay(replay_path)
                state, _, _ = activation_values(
                    replay_path,
                    layout,
                    _Weights(self, src, layout),
                    None,
                    None,
                    self.reference_ids,
                    lambda *a: None,
                    self.device,
                    attention=False,
                )
            except Exception:  # noqa: BLE001 -- as ``_activations``: no replay state, no increments
                self.replay_prev = None
            else:
                self.replay_prev = state

    def _reused(self, ckpt, identity, replay_path, layout, outside, values, findings, extras, meta):
        """The result of a checkpoint whose stored part is reused (see ``_try_reuse``)."""
        skipped = [Skipped(x["path"], x["reason"], x.get("error", True)) for x in meta.get("skipped", [])]
        self.prev = _Prev(ckpt, identity)
        self.replay_prev = _replay_state_from(replay_path, extras) if replay_path and not skipped else None
        return CheckpointResult(
            ckpt.step, values, findings, True, extras, skipped, outside + meta.get("outside", [])
        )

    def _activations(self, replay_path, layout, weights, prev_weights, values):
        """The activation side (when this checkpoint has a replay file): ``(extras, skipped, external
        files outside the run it reads)``.  This is the replay file's containment boundary: the file is
        first read through in a worker with a time limit (``replay_check``), and a file refused there,
        or any failure while it is used, loses only the activation side of this checkpoint (one
        skipped entry naming the file).  A problem of the weights themselves is the checkpoint's."""
        if replay_path is None:
            self.replay_prev = None
            return {}, [], []
        n_layers = layout.n_layers
        act: dict[str, np.ndarray] = {}
        try:
            external = self._checked_replay(replay_path)
            prev = self.replay_prev
            if prev is not None and not self._replay_is_checked(prev.path):
                prev = None  # changed, or gone, since it was checked: no activation increments
            state, ids, extras = activation_values(
                replay_path,
                layout,
                weights,
                prev,
                prev_weights,
                self.reference_ids,
                functools.partial(_put, act, n_layers),
                self.device,
            )
        except ReplayError as e:
            self.replay_prev = None
            return {}, [Skipped(str(replay_path), f"replay file not used: {e.message}")], []
        except CkptscanError:
            raise
        except Exception as e:  # noqa: BLE001 -- the replay file's containment boundary (docstring)
            self.replay_prev = None
            return {}, [Skipped(str(replay_path), f"replay file not used: {unexpected(e)}")], []
        if self.reference_ids is None and ids is not None:
            self.reference_ids = ids
        self.replay_prev = state
        values.update(act)
        return extras, [], external

    def _checked_replay(self, path: Path) -> list[str]:
        """Read ``path`` through in the worker unless it was, unchanged, already; the external files it
        reads outside the run.  ReplayError when it must not be used."""
        try:
            stat = file_stat(path)
        except InputError as e:  # gone since it was found
            raise ReplayError(e.message, path) from None
        if self._replay_checked.get(path, (None,))[0] != stat:
            external = self.replay_checker.check(path, self.budget)
            self._replay_checked[path] = (stat, self._outside(external))
        return self._replay_checked[path][1]

    def _replay_is_checked(self, path: Path) -> bool:
        try:
            self._checked_replay(path)
        except CkptscanError:
            return False
        return True

    def _outside(self, paths) -> list[str]:
        """The paths, symlinks resolved, that lie outside the run directory (read, but worth a note)."""
        run = self.run_dir.resolve()
        out = []
        for p in paths:
            real = Path(p).resolve()
            if real != run and run not in real.parents:
                out.append(str(real))
        return out

    def _try_reuse(self, part: Path, identity: dict):
        """(values, findings, extras, meta) of a stored part whose identity matches, else None; a part
        that cannot be read is recomputed."""
        if not part.exists():
            return None
        try:
            ident, values, extras = load_part(part)
            if ident != json.loads(json.dumps(identity)):
                return None
            meta = json.loads(bytes(extras.pop("meta")).decode()) if "meta" in extras else {}
        except ValueError:  # a torn or foreign file (json's errors are ValueErrors too)
            return None
        return values, meta.get("findings", []), extras, meta

    @contextlib.contextmanager
    def _open_prev(self):
        """The previous analysed checkpoint's tensors (``_Weights``), or None when there is none, it
        cannot be read any more, or its files changed since it was analysed (then there is simply no
        increment, and the part's identity makes the next run recompute it)."""
        if self.prev is None:
            yield None
            return
        try:
            src = open_checkpoint(self.prev.ckpt.path, trust_pickle=self.opt.trust_pickle)
        except CkptscanError:
            yield None
            return
        with src:
            try:
                config, config_path = checkpoint_config(self.prev.ckpt.path, src, self.run_dir, self.opt)
                layout = resolve_layout(src.infos(), config, self.opt.layout_file, self.opt.model_overrides)
            except CkptscanError:
                yield None
                return
            if file_identity(src, config_path) != self.prev.identity["files"]:
                yield None
                return
            yield _Weights(self, src, layout)

    def _load(self, family: Family, block, src) -> tuple:
        return tuple(
            None if x is None else x.to(self.device, torch.float32) for x in family.load(block, src.read)
        )

    def _compute(self, weights: _Weights, layout: Layout, prev: _Weights | None, step: int):
        """The weight-side monitors of one checkpoint: every registered family over its blocks, block
        by block (the next block is read while this one is computed).  Returns the values, the
        overflow findings and what each block keeps for the next checkpoint."""
        n_layers = layout.n_layers
        values: dict[str, np.ndarray] = {}
        findings: list[dict] = []
        kept: dict[tuple[str, str, int], object] = {}
        nonfinite = np.zeros((n_layers, 1), dtype=np.float32)
        put = functools.partial(_put, values, n_layers)
        carried = self.prev.kept if self.prev is not None else {}

        for fam in registry.FAMILIES:
            blocks = fam.blocks(layout)

            def load(b, fam=fam):
                prefix = fam.prefix_of(b)
                return weights.load(fam, prefix, b.layer), (
                    _safe(prev.load, fam, prefix, b.layer) if prev is not None else None
                )

            for b, (now, before) in zip(
                blocks, prefetch([functools.partial(load, b) for b in blocks]), strict=False
            ):
                bad = nonfinite_count(*now)
                nonfinite[b.layer, 0] += bad
                if bad:
                    findings.append(_overflow(step, b.layer, b.tensors, bad))
                    continue
                prefix = fam.prefix_of(b)
                width = fam.columns(layout, prefix)
                if before is not None and not (_same_shapes(before, now) and _finite(*before)):
                    before = None
                st = BlockStep(b, now, before, carried.get((fam.name, prefix, b.layer)), self.workspace)
                out = dict(fam.pair(st)) if (fam.pair is not None and before is not None) else {}
                out.update(fam.single(st))
                for k, v in out.items():
                    name = names.join(prefix, k)
                    put(name, b.layer, v, width if registry.spec(name).scope == "head" else 1)
                if st.keep is not None:
                    kept[(fam.name, prefix, b.layer)] = st.keep

        values[registry.NONFINITE] = nonfinite
        # make sure every registered series of a family present in this layout exists (NaN where
        # undefined), so the timeline has the same columns at every step
        for fam in registry.FAMILIES:
            if not fam.blocks(layout):
                continue
            for s in fam.series:
                width = fam.columns(layout, names.split(s.name)[0]) if s.scope == "head" else 1
                values.setdefault(s.name, np.full((n_layers, width), np.nan, dtype=np.float32))
        return values, findings, kept


# bytes per q/k weight element of the attention block being analysed, at its peak: float32 copies of
# this and the previous checkpoint's block and of the next block read ahead (4 x 4), the stored
# tensors they are converted from (up to 2 x 4), and the float64 copies and differences the Gram
# products use (4 x 8)
BYTES_PER_WEIGHT = 56
BYTES_PER_GRAM_ENTRY = 8 * 12  # h x h float64 blocks per head: Grams, cross terms, the 2h x 2h cores


def memory_needed(layout: Layout, b: AttnBlock) -> int:
    """An estimate of the peak bytes one checkpoint's analysis needs while it computes block ``b``:
    the block's share (``BYTES_PER_WEIGHT``, ``BYTES_PER_GRAM_ENTRY``) plus every per-layer result
    array (one float32 per layer, head and monitor)."""
    heads = b.n_heads + b.n_kv_heads
    width = max((x.n_heads for x in layout.attention), default=1)
    arrays = 4 * layout.n_layers * width * len(registry.REGISTRY)
    block = BYTES_PER_WEIGHT * heads * b.head_dim * b.hidden + BYTES_PER_GRAM_ENTRY * heads * b.head_dim**2
    return block + arrays


def check_memory(layout: Layout, budget: int) -> None:
    """Refuse (before anything is allocated) a checkpoint whose analysis would need more than the
    memory ``budget`` (``limits.memory_budget``): a clear line instead of a MemoryError or the OOM killer."""
    for b in layout.attention:
        need = memory_needed(layout, b)
        if need > budget:
            raise InputError(
                f"{b.tensors[0]}: analysing layer {b.layer} ({b.n_heads} heads, "
                f"{b.n_kv_heads} kv heads, head_dim {b.head_dim}, hidden {b.hidden}, "
                f"{layout.n_layers} layers) needs about {size_text(need)}, more than the memory "
                f"budget of {size_text(budget)} (set {BUDGET_ENV} to allow more)"
            )


def _has_every_series(values: dict, layout: Layout) -> bool:
    """A stored part holds every series of the registered families this layout has (the loop
    writes them all, NaN where undefined), so one that lacks some predates a family registered now."""
    return all(s.name in values for fam in registry.FAMILIES if fam.blocks(layout) for s in fam.series)


def _safe(load, *args):
    """A previous checkpoint's block, or None if it cannot be read (no increment then)."""
    try:
        return load(*args)
    except (CkptscanError, KeyError):
        return None


def _put(values: dict, n_layers: int, name: str, layer: int, vec, width: int) -> None:
    """Store one layer's vector of a series into its [layers, width] array (NaN elsewhere)."""
    arr = values.get(name)
    if arr is None:
        arr = values[name] = np.full((n_layers, width), np.nan, dtype=np.float32)
    v = vec.detach().double().cpu().numpy().reshape(-1) if isinstance(vec, torch.Tensor) else np.ravel(vec)
    arr[layer, : v.shape[0]] = v


def _stat_identity(path: Path | None):
    if path is None:
        return None
    st = path.stat()
    return [str(path), st.st_size, st.st_mtime_ns]


def _replay_state_from(replay_path: Path, extras: dict) -> ReplayState:
    topk = {layer: torch.from_numpy(v.astype(np.int64)) for layer, v in topk_by_layer(extras).items()}
    return ReplayState(replay_path, topk)


def prefetch(loads: list[Callable[[], object]]):
    """Yield ``load()`` results in order, running the next load in a thread while the caller
    computes on the current one (reads and dtype conversion release the GIL, as do torch's kernels).
    At most one result is held ahead, so memory stays at two blocks' tensors."""
    if len(loads) <= 1:
        for load in loads:
            yield load()
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckptscan-read") as pool:
        pending = pool.submit(loads[0])
        for nxt in loads[1:]:
            current = pending.result()
            pending = pool.submit(nxt)
            yield current
        yield pending.result()


# the temporary name ``atomic_write`` gives a part file (``tempfile.mkstemp`` adds the random middle)
_PART_TMP = re.compile(r"\.step_\d{12}\.npz\.[a-z0-9_]+\.tmp")


def _remove_stale_temporaries(parts_dir: Path) -> None:
    """A killed run can leave the temporary of a part file's atomic write behind; it is never read.
    Only files named exactly as this code names them are removed, in the parts folder (which
    ``check_outputs`` keeps outside the evidence); a cleanup that fails is left for the next run."""
    try:
        stale = [p for p in parts_dir.iterdir() if _PART_TMP.fullmatch(p.name) and p.is_file()]
    except OSError:
        return
    for tmp in stale:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _finite(*ts) -> bool:
    return nonfinite_count(*ts) == 0


def _same_shapes(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(
        x is None and y is None or (x is not None and y is not None and x.shape == y.shape)
        for x, y in zip(a, b, strict=True)
    )


def _overflow(step: int, layer: int, tensors, count: int) -> dict:
    return {
        "kind": "overflow",
        "step": step,
        "layer": layer,
        "tensors": list(tensors),
        "nonfinite": int(count),
    }


def run_analysis(
    run_dir: Path,
    out_dir: Path,
    checkpoints: list[Checkpoint],
    options: Options,
    on_progress: Callable[[int, Checkpoint, str], None] | None = None,
    debug: bool = False,
) -> tuple[list[CheckpointResult], list[Skipped], dict | None]:
    """Analyse every checkpoint; a checkpoint that cannot be read is skipped with its reason.

    This loop is the containment boundary of a checkpoint: whatever reading or analysing one does
    (a ``CkptscanError`` naming the problem, or any exception a crafted file provokes in a library),
    that checkpoint is skipped with a one-line reason and the next one is analysed.  Only an
    ``UsageError`` (an ``OutputError``: the results cannot be written; a bad option) ends the run, and
    ``--debug`` stops at the first problem with its traceback."""
    an = Analyzer(run_dir, out_dir, options)
    results: list[CheckpointResult] = []
    skipped: list[Skipped] = []
    try:
        for i, ck in enumerate(checkpoints):
            try:
                res = an.process(ck)
                assert res is not None  # computed or reused: only compute=False gives None
            except UsageError:  # an option or the output location is wrong: every checkpoint would fail
                raise
            except Exception as e:  # the containment boundary: see the docstring
                if debug:
                    raise
                skipped.append(Skipped(str(ck.path), _reason(e, ck)))
                status = "skipped"
            else:
                results.append(res)
                skipped.extend(res.skipped)
                status = "reused" if res.reused else "analysed"
            if on_progress:
                on_progress(i, ck, status)
    finally:
        an.replay_checker.close()
    return results, skipped, an.layout_desc


def _reason(err: Exception, ck: Checkpoint) -> str:
    """One line for a skipped checkpoint: a CkptscanError's message (with the file it names when that
    is one inside the checkpoint: a shard, config.json), else what was raised."""
    if not isinstance(err, CkptscanError):
        return unexpected(err)
    return err.message if err.path in (None, str(ck.path)) else str(err)


def baseline_out_dir(out_dir: Path, baseline: Path) -> Path:
    """Where the results of a ``--baseline`` run are kept: inside this run's output folder."""
    return out_dir / "baseline" / baseline.resolve().name


# what ckptscan writes in an output folder (part files and their temporaries live in parts/)
OUTPUT_ENTRIES = ("parts", "timeline.h5", "summary.json")


def check_outputs(evidence: list[Path | None], out_dir: Path | None = None, files: tuple = ()) -> None:
    """Evidence is read-only, checked before anything is written: the output folder, every path written
    in it (``OUTPUT_ENTRIES``) and each output file (``--html``, ``--junit``) must lie outside every
    evidence folder (the run first, then a ``--baseline`` run).  None entries are ignored.  Paths are
    compared resolved, so a symlink into the run is refused too."""
    written: list[tuple[Path | None, Path]] = (
        [] if out_dir is None else [(out_dir, out_dir / e) for e in ("", *OUTPUT_ENTRIES)]
    )
    written += [(None, Path(f)) for f in files if f is not None]
    for i, folder in enumerate(Path(e) for e in evidence if e is not None):
        inside = folder.resolve()
        for out, path in written:
            p = path.resolve()
            if p != inside and inside not in p.parents:
                continue
            what = f"output {path}" if out is None else f"output folder {out}"
            what += f" (its {path.name})" if out is not None and path != out else ""
            whose = "the run directory" if i == 0 else "the baseline run"
            raise UsageError(
                f"{what} is inside {whose} {folder}: ckptscan never writes there; choose another location"
            )
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"output path {out_dir} exists and is not a folder")
