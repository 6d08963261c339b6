"""The training step a checkpoint records about itself, for checkpoints whose name is not a step.

Each source reads one small thing, through the same safe paths as the weights (JSON, or
``torch.load(weights_only=True)``, memory-mapped): never the tensors.  A source that does not apply or
cannot be read gives ``None``; the caller says what was tried.

========================  ==========================================================================
source                    where
========================  ==========================================================================
``trainer_state``         ``trainer_state.json`` ``global_step`` (Hugging Face Trainer)
``lightning``             the ``.ckpt`` file's ``global_step`` (PyTorch Lightning)
``optimizer``             ``optimizer.bin``/``.pt``: the largest per-parameter ``step`` (Adam-like
                          optimizers count optimizer steps); else ``scheduler.bin``/``.pt``
                          ``last_epoch`` (accelerate ``save_state``)
``dcp_train_state``       the DCP entry ``train_state.step`` (torchtitan)
``olmo_core``             ``train/rank0.pt`` ``global_step`` (OLMo-core)
``deepspeed``             ``*model_states.pt`` ``global_steps`` (DeepSpeed)
========================  ==========================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from ckptscan.errors import CkptscanError
from ckptscan.limits import JsonError, as_step, parse_json
from ckptscan.readers.dcp import METADATA_FILE, DcpSource
from ckptscan.readers.torchfile import load_file


def _as_step(v: object) -> int | None:
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        v = v.item()
    return as_step(v)


def _load(path: Path) -> object | None:
    if not path.is_file():
        return None
    try:
        return load_file(path)
    except CkptscanError:
        return None


def _key(obj: object, key: str) -> int | None:
    return _as_step(obj.get(key)) if isinstance(obj, Mapping) else None


def _trainer_state(ckpt: Path) -> int | None:
    try:
        return _key(parse_json((ckpt / "trainer_state.json").read_bytes()), "global_step")
    except (OSError, JsonError):
        return None


def _lightning(ckpt: Path) -> int | None:
    return _key(_load(ckpt), "global_step") if ckpt.is_file() else None


def _first(folder: Path, names: tuple[str, ...]) -> object | None:
    for name in names:
        obj = _load(folder / name)
        if obj is not None:
            return obj
    return None


def _optimizer(ckpt: Path) -> int | None:
    opt = _first(ckpt, ("optimizer.bin", "optimizer.pt"))
    state = opt.get("state") if isinstance(opt, Mapping) else None
    if isinstance(state, Mapping):
        steps = [_key(s, "step") for s in state.values()]
        found = [s for s in steps if s is not None]
        if found:
            return max(found)
    return _key(_first(ckpt, ("scheduler.bin", "scheduler.pt")), "last_epoch")


def _dcp_train_state(ckpt: Path) -> int | None:
    if not (ckpt / METADATA_FILE).is_file():
        return None
    try:
        with DcpSource(ckpt) as src:
            if "train_state.step" not in src.infos():
                return None
            return _as_step(src.read("train_state.step"))
    except CkptscanError:
        return None


def _olmo_core(ckpt: Path) -> int | None:
    return _key(_load(ckpt / "train" / "rank0.pt"), "global_step")


def _deepspeed(ckpt: Path) -> int | None:
    for f in sorted(ckpt.glob("*model_states.pt")) if ckpt.is_dir() else ():
        step = _key(_load(f), "global_steps")
        if step is not None:
            return step
    return None


SOURCES: dict[str, Callable[[Path], int | None]] = {
    "trainer_state": _trainer_state,
    "lightning": _lightning,
    "optimizer": _optimizer,
    "dcp_train_state": _dcp_train_state,
    "olmo_core": _olmo_core,
    "deepspeed": _deepspeed,
}


def recorded_step(ckpt: Path, sources: tuple[str, ...]) -> int | None:
    """The first step one of ``sources`` finds in the checkpoint folder or file, else ``None``.  A
    source that fails on what it reads, however it fails, has found nothing (the caller says what was
    tried)."""
    for name in sources:
        try:
            step = SOURCES[name](Path(ckpt))
        except Exception:  # noqa: BLE001 -- the containment boundary of these small step readers
            step = None
        if step is not None:
            return step
    return None
