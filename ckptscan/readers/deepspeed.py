"""DeepSpeed ZeRO-3 checkpoint folders, read without DeepSpeed installed.

A ZeRO-3 ``global_stepN/`` folder holds, per data-parallel rank ``r``,
``zero_pp_rank_<r>_mp_rank_00_model_states.pt`` (the module with empty placeholders, and
``param_shapes``: the parameters' names and shapes, group by group) and
``zero_pp_rank_<r>_mp_rank_00_optim_states.pt`` (``optimizer_state_dict.fp32_flat_groups``: this
rank's fp32 master partitions).  Each parameter is split into ``world`` equal slices of
``ceil(numel / world)`` elements (the last one padded); rank ``r`` stores slice ``r`` of every
parameter, back to back, in parameter order.  A parameter is therefore the concatenation of its slice
in every rank's flat partition, cut to ``numel`` (DeepSpeed's own ``zero_to_fp32.py`` does the same).

ZeRO-1/2 folders need none of this: ``mp_rank_00_model_states.pt`` holds the whole module
(``torchfile.py``).

The optimizer files pickle a few DeepSpeed classes next to the tensors (the loss scaler, the ZeRO stage
enum, fragment addresses).  They are loaded with ``weights_only=True`` and inert stand-ins for exactly
those classes, so nothing of DeepSpeed is imported and nothing from the file runs; any other class is
refused as usual.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Self

import torch

from ckptscan.errors import FormatError
from ckptscan.readers._common import backed, check_unchanged, dtype_name, file_size, file_stat, rel_name
from ckptscan.readers.base import TensorInfo
from ckptscan.readers.registry import Format, Listing, Plan, register_format
from ckptscan.readers.torchfile import load_file

MODEL_STATES = "zero_pp_rank_*_mp_rank_*_model_states.pt"
OPTIM_STATES = "zero_pp_rank_*_mp_rank_*_optim_states.pt"
_RANK = re.compile(r"zero_pp_rank_(\d+)_mp_rank_(\d+)_")


class _Inert:
    """Stands for a pickled DeepSpeed object: its attributes are set, nothing else happens."""


class _Value:
    """Stands for a pickled DeepSpeed enum member (``ZeroStageEnum(3)``)."""

    def __init__(self, value: object):
        self.value = value


_STANDINS: list[Callable[..., Any] | tuple[Callable[..., Any], str]] = [
    (_Inert, "deepspeed.runtime.fp16.loss_scaler.LossScaler"),
    (_Inert, "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler"),
    (_Value, "deepspeed.runtime.zero.config.ZeroStageEnum"),
    (_Inert, "deepspeed.utils.tensor_fragment.fragment_address"),
]


def load_zero_file(path: Path) -> object:
    """``torch.load(weights_only=True)`` of a DeepSpeed file, its known DeepSpeed classes stood in for."""
    with torch.serialization.safe_globals(_STANDINS):
        return load_file(path)


def rank_files(folder: Path, pattern: str) -> list[Path]:
    """The files of one kind, by data-parallel rank; several model-parallel ranks are refused."""
    ranked = [(p, m) for p in folder.glob(pattern) if (m := _RANK.match(p.name))]
    if len({m.group(2) for _, m in ranked}) > 1:
        raise FormatError(
            "ZeRO-3 checkpoint with several model-parallel ranks (mp_rank_*): not supported", folder
        )
    return [p for p, _ in sorted(ranked, key=lambda pm: int(pm[1].group(1)))]


def _get(obj: object, *keys: str, path: Path) -> object:
    for k in keys:
        if not isinstance(obj, Mapping) or k not in obj:
            raise FormatError(f"not a DeepSpeed ZeRO-3 file: no {'.'.join(keys)}", path)
        obj = obj[k]
    return obj


def _shape(name: object, shape: object, path: Path) -> tuple[int, ...]:
    """A ``param_shapes`` entry as a tuple of non-negative ints, else FormatError."""
    dims = list(shape) if isinstance(shape, (list, tuple, torch.Size)) else None
    if dims is None or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in dims):
        raise FormatError(
            f"param_shapes gives {str(name)[:80]!r} the shape {str(shape)[:80]}: not a list of "
            f"non-negative integers",
            path,
        )
    return tuple(dims)


class ZeroSource:
    """A ``TensorSource`` over a ZeRO-3 folder: every parameter rebuilt from the ranks' fp32 partitions."""

    def __init__(self, folder: Path):
        self.path = folder
        self.format = "deepspeed-zero3"
        models, self._optims = rank_files(folder, MODEL_STATES), rank_files(folder, OPTIM_STATES)
        if not models or len(self._optims) != len(models):
            raise FormatError(
                f"checkpoint incomplete: {len(models)} ZeRO model-state files but "
                f"{len(self._optims)} optimizer-state files",
                folder,
            )
        groups = _get(load_zero_file(models[0]), "param_shapes", path=models[0])
        if isinstance(groups, Mapping):
            groups = [groups]
        if not isinstance(groups, list) or not all(isinstance(g, Mapping) for g in groups):
            raise FormatError("param_shapes is not a list of name -> shape maps", models[0])
        self._world = len(self._optims)
        self._where: dict[str, tuple[tuple[int, ...], int, int]] = {}  # name -> shape, offset, slice
        offset = 0
        for group in groups:
            for name, shape in group.items():
                shape = _shape(name, shape, models[0])
                part = math.ceil(math.prod(shape) / self._world)
                self._where[str(name)] = (shape, offset, part)
                offset += part
        self._flat: dict[int, list[torch.Tensor]] = {}
        self._stats: dict[int, tuple[int, int]] = {}  # the memory-mapped optimizer files, as loaded

    def infos(self) -> dict[str, TensorInfo]:
        file = rel_name(self.path, self._optims[0])
        return {
            n: TensorInfo(n, shape, dtype_name(torch.float32), file)
            for n, (shape, _, _) in self._where.items()
        }

    def _partitions(self, rank: int) -> list[torch.Tensor]:
        if rank not in self._flat:
            path = self._optims[rank]
            self._stats[rank] = file_stat(path)
            groups = _get(load_zero_file(path), "optimizer_state_dict", "fp32_flat_groups", path=path)
            if not isinstance(groups, list) or not all(isinstance(t, torch.Tensor) for t in groups):
                raise FormatError("fp32_flat_groups is not a list of tensors", path)
            self._flat[rank] = [backed(t, f"fp32_flat_groups[{i}]", path) for i, t in enumerate(groups)]
        return self._flat[rank]

    def _slice(self, rank: int, offset: int, n: int) -> torch.Tensor:
        pieces, start = [], 0
        for t in self._partitions(rank):
            lo, hi = max(offset, start), min(offset + n, start + t.numel())
            if lo < hi:
                pieces.append(t.reshape(-1)[lo - start : hi - start])
            start += t.numel()
        got = sum(p.numel() for p in pieces)
        if got != n:
            raise FormatError(
                f"fp32 partition holds {start} elements, param_shapes need more "
                f"(elements {offset}..{offset + n})",
                self._optims[rank],
            )
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces)

    def read(self, name: str) -> torch.Tensor:
        if name not in self._where:
            raise KeyError(name)
        shape, offset, part = self._where[name]
        pieces = [self._slice(r, offset, part) for r in range(self._world)]  # views into mapped files
        self._check_unchanged()  # as torchfile does: a file rewritten in place must not fault the copy
        flat = torch.cat(pieces)
        self._check_unchanged()
        return flat[: math.prod(shape)].view(shape)

    def _check_unchanged(self) -> None:
        for rank, stat in self._stats.items():
            check_unchanged(self._optims[rank], stat)

    def close(self) -> None:
        self._flat.clear()
        self._stats.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- the format entry (ckptscan/readers/registry.py) -----------------------------------------------


def _plan_folder(ls: Listing) -> Plan | None:
    if ls.only(MODEL_STATES):
        return Plan(ZERO3, "deepspeed-zero3", ls.folder)
    return None


def _open(plan: Plan, trust_pickle: bool) -> ZeroSource:
    return ZeroSource(plan.path)


def _check_complete(plan: Plan) -> None:
    models, optims = rank_files(plan.path, MODEL_STATES), rank_files(plan.path, OPTIM_STATES)
    if len(optims) != len(models):
        raise FormatError(
            f"checkpoint incomplete: {len(models)} ZeRO model-state files but "
            f"{len(optims)} optimizer-state files",
            plan.path,
        )
    for f in models + optims:
        if file_size(f) == 0:
            raise FormatError("file is empty (0 bytes): truncated or interrupted save", f)


ZERO3 = register_format(
    Format(
        name="deepspeed-zero3",
        precedence=40,
        looked_for="DeepSpeed ZeRO-3 rank files",
        plan_folder=_plan_folder,
        open=_open,
        check_complete=_check_complete,
        last_resort=True,  # its rank files are training state beside every other format's weights
    )
)
