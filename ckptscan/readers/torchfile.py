"""PyTorch pickle files: ``pytorch_model.bin``, ``*.pt``, ``*.pth``, ``*.ckpt`` and sharded ``.bin`` indexes.

Safety: files are loaded with ``weights_only=True`` (torch's restricted unpickler) unless the caller
passes ``trust_pickle=True``; a file that needs arbitrary globals raises ``UnsafePickleError`` and
nothing in it runs.

Memory: ``torch.load`` materialises a whole file at once, so zip-format files (the default since
torch 1.6) are loaded with ``mmap=True``: tensors then alias a private mapping of the file and only
the pages actually read are paged in.  Legacy (pre-zip) files cannot be mapped and are loaded into
memory; of those, only the most recently used shard is kept.  Loaded dicts are cached until close().
Returned tensors may share storage with that cache: treat them as read-only (clone before writing).

A memory-mapped file that another process rewrites in place would end the process with SIGBUS on
the next access to a page of it, so ``read`` checks the file's size and mtime, copies the tensor out
of the mapping and checks again (``FormatError`` when it changed); the copy is what the caller gets.
Every tensor must hold the bytes its shape claims (``limits.check_backed``): a stride-0 view saved
in a small file is refused rather than expanded.

Which dict holds the weights: a plain state dict is used as is; a dict with a ``state_dict``
(Lightning), ``module`` (DeepSpeed) or ``model`` mapping is unwrapped (first match in that order).
Nested dicts (at most ``MAX_NESTING`` levels) are flattened with dot-joined names; non-tensor leaves
are ignored.  Names are kept as
stored (a Lightning ``model.`` prefix included): layout resolution interprets them.  A Lightning
checkpoint's ``hyper_parameters`` are kept for the model config (``TorchSource.hyper_parameters``)
only when the file was loaded with ``weights_only`` (never under ``--trust-pickle``).

A file that needs a Python module which is not installed (possible only with ``--trust-pickle``) is
reported as such: the file is fine, the module is missing.
"""

from __future__ import annotations

import pickle
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Self

import torch

from ckptscan.errors import FormatError, InputError, UnsafePickleError
from ckptscan.readers._common import (
    backed,
    check_shards,
    check_unchanged,
    dtype_name,
    file_size,
    file_stat,
    load_weight_map,
    open_binary,
    os_error,
    rel_name,
)
from ckptscan.readers.base import TensorInfo
from ckptscan.readers.registry import Format, Listing, Plan, register_format, weight_files

WRAPPER_KEYS = ("state_dict", "module", "model")
MAX_NESTING = 64  # dict levels in a state dict: real ones have a few
HPARAMS_KEY = "hyper_parameters"  # Lightning
ZIP_MAGIC = b"PK\x03\x04"


def is_zip(path: Path) -> bool:
    with open_binary(path) as f:
        return f.read(4) == ZIP_MAGIC


def _short_reason(err: BaseException) -> str:
    """The informative line of torch's long weights-only error (which global, which opcode)."""
    text = str(err)
    marker = "WeightsUnpickler error:"
    if marker in text:
        text = text.split(marker, 1)[1]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    candidates = [
        ln for ln in lines if not ln.startswith(("Weights only load failed", "Check the documentation"))
    ]
    reason = (candidates or lines or [type(err).__name__])[0]
    reason = reason.split(" Please use `torch.serialization", 1)[0]
    return reason if len(reason) <= 200 else reason[:197] + "..."


def load_file(path: Path, trust_pickle: bool = False) -> object:
    """``torch.load`` on the CPU, memory-mapped when possible, with every failure as a ckptscan error."""
    if file_size(path) == 0:
        raise FormatError("file is empty (0 bytes): truncated or interrupted save", path)
    mmap_ok = is_zip(path)
    try:
        return torch.load(str(path), map_location="cpu", mmap=mmap_ok, weights_only=not trust_pickle)
    except pickle.UnpicklingError as err:
        reason = _short_reason(err)
        if not trust_pickle and "global" in reason.lower():
            raise UnsafePickleError(
                f"refusing to unpickle: this file needs arbitrary code execution to load ({reason}); "
                "re-run with --trust-pickle only if you trust its origin",
                path,
            ) from err
        raise FormatError(f"not a loadable torch file ({reason})", path) from err
    except OSError as err:
        if err.strerror:  # a real OS problem (permission...), not torch's OSError-free parse failures
            raise os_error(path, err) from err
        raise FormatError(f"not a loadable torch file ({_short_reason(err)})", path) from err
    except InputError:
        raise
    except ModuleNotFoundError as err:  # only with trust_pickle: a class from a module not installed here
        raise FormatError(
            f"unpickling needs the Python module {err.name!r}, which is not installed here: install "
            f"{str(err.name).split('.')[0]!r} to read this file with --trust-pickle",
            path,
        ) from err
    except Exception as err:  # corrupt zip, truncated pickle, a trusted pickle raising...
        raise FormatError(
            f"not a loadable torch file ({type(err).__name__}: {_short_reason(err)})", path
        ) from err


def extract_state_dict(obj: object, path: Path) -> dict[str, torch.Tensor]:
    """Find the weights in a loaded object (see the module docstring) and flatten them."""
    if isinstance(obj, torch.nn.Module):  # a whole pickled model (only possible with trust_pickle)
        obj = obj.state_dict()
    if not isinstance(obj, Mapping):
        raise FormatError(f"does not contain a state dict (top-level object is {type(obj).__name__})", path)
    for key in WRAPPER_KEYS:
        inner = obj.get(key)
        if isinstance(inner, torch.nn.Module):
            inner = inner.state_dict()
        if isinstance(inner, Mapping) and (out := _flatten(inner, path)):
            return out
    out = _flatten(obj, path)
    if not out:
        raise FormatError("contains no tensors", path)
    return out


def _flatten(obj: Mapping, path: Path) -> dict[str, torch.Tensor]:
    """The tensors of nested mappings, depth first, names dot-joined (no recursion: a crafted file may
    nest thousands of levels; more than ``MAX_NESTING`` is refused)."""
    out: dict[str, torch.Tensor] = {}
    stack = [("", iter(obj.items()))]
    while stack:
        prefix, items = stack[-1]
        for key, value in items:
            name = f"{prefix}{key}"
            if isinstance(value, torch.Tensor):
                out[name] = value
            elif isinstance(value, Mapping):
                if len(stack) >= MAX_NESTING:
                    raise FormatError(
                        f"state dict nests deeper than {MAX_NESTING} levels (at {name[:80]!r})", path
                    )
                stack.append((name + ".", iter(value.items())))
                break
        else:
            stack.pop()
    return out


class TorchSource:
    """A ``TensorSource`` over one or several torch files, optionally driven by a ``.bin`` index."""

    def __init__(
        self,
        path: Path,
        folder: Path,
        files: dict[str, Path],
        weight_map: dict[str, str] | None = None,
        trust_pickle: bool = False,
    ):
        self.path = path
        self.format = "torch"
        self._folder = folder
        self._files = files
        self._weight_map = weight_map
        self._trust = trust_pickle
        self._loaded: dict[str, dict[str, torch.Tensor]] = {}
        self._hparams: dict[str, Mapping] = {}
        self._legacy: set[str] = set()  # loaded without mmap: keep at most one of these in memory
        self._mapped: dict[str, tuple[int, int]] = {}  # memory-mapped files -> their file_stat at load
        self._infos: dict[str, TensorInfo] | None = None

    @classmethod
    def from_file(cls, file: Path, trust_pickle: bool = False) -> TorchSource:
        return cls(file, file.parent, {file.name: file}, trust_pickle=trust_pickle)

    @classmethod
    def from_files(cls, folder: Path, files: list[Path], trust_pickle: bool = False) -> TorchSource:
        return cls(folder, folder, {rel_name(folder, f): f for f in files}, trust_pickle=trust_pickle)

    @classmethod
    def from_index(cls, index_file: Path, trust_pickle: bool = False) -> TorchSource:
        folder = index_file.parent
        weight_map = load_weight_map(index_file)
        files = check_shards(folder, weight_map, index_file)
        return cls(folder, folder, files, weight_map, trust_pickle=trust_pickle)

    def _state(self, rel: str) -> dict[str, torch.Tensor]:
        if rel not in self._loaded:
            path = self._files[rel]
            legacy = not is_zip(path)
            if legacy:
                for old in self._legacy:
                    self._loaded.pop(old, None)
                self._legacy = {rel}
            else:
                self._mapped[rel] = file_stat(path)
            obj = load_file(path, self._trust)
            if not self._trust and isinstance(obj, Mapping) and isinstance(obj.get(HPARAMS_KEY), Mapping):
                self._hparams[rel] = obj[HPARAMS_KEY]
            self._loaded[rel] = extract_state_dict(obj, path)
        return self._loaded[rel]

    def hyper_parameters(self) -> Mapping | None:
        """A Lightning checkpoint's ``hyper_parameters`` (one file only), else None."""
        if len(self._files) != 1:
            return None
        rel = next(iter(self._files))
        self._state(rel)
        return self._hparams.get(rel)

    def infos(self) -> dict[str, TensorInfo]:
        if self._infos is None:
            self._infos = self._collect()
        return dict(self._infos)

    def _collect(self) -> dict[str, TensorInfo]:
        out: dict[str, TensorInfo] = {}
        if self._weight_map is not None:
            for name, rel in self._weight_map.items():
                t = self._state(rel).get(name)
                if t is None:
                    raise FormatError(
                        f"tensor {name!r} is listed in the index but missing from this shard",
                        self._files[rel],
                    )
                out[name] = TensorInfo(name, tuple(t.shape), dtype_name(t.dtype), rel)
            return out
        for rel in self._files:
            for name, t in self._state(rel).items():
                if name in out:
                    raise FormatError(
                        f"tensor {name!r} appears in both {out[name].file} and {rel}", self.path
                    )
                out[name] = TensorInfo(name, tuple(t.shape), dtype_name(t.dtype), rel)
        return out

    def read(self, name: str) -> torch.Tensor:
        if self._weight_map is not None:
            rel = self._weight_map.get(name)
        else:
            info = self.infos().get(name)
            rel = info.file if info else None
        if rel is None:
            raise KeyError(name)
        t = self._state(rel).get(name)
        if t is None:
            raise FormatError(
                f"tensor {name!r} is listed in the index but missing from this shard", self._files[rel]
            )
        path = self._files[rel]
        if t.layout != torch.strided or t.is_quantized:
            raise FormatError(f"tensor {name!r} has unsupported layout {t.layout} (quantized/sparse)", path)
        t = backed(t.detach(), name, path)  # a plain Tensor even if stored as nn.Parameter
        if rel not in self._mapped:
            return t
        check_unchanged(path, self._mapped[rel])
        t = t.clone()  # out of the mapping: later use cannot fault on a file rewritten meanwhile
        check_unchanged(path, self._mapped[rel])
        return t

    def close(self) -> None:
        self._loaded.clear()
        self._hparams.clear()
        self._legacy.clear()
        self._mapped.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- the format entry (ckptscan/readers/registry.py) -----------------------------------------------

SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


def _plan_file(path: Path) -> Plan | None:
    if path.name.endswith(".index.json"):
        return Plan(TORCH, "torch", path.parent, index=path)
    if path.name.endswith(SUFFIXES):
        return Plan(TORCH, "torch", path, files=[path])
    return None


def _plan_folder(ls: Listing) -> Plan | str | None:
    folder, names = ls.folder, ls.names
    index = (
        ["pytorch_model.bin.index.json"]
        if "pytorch_model.bin.index.json" in names
        else ls.only("*.bin.index.json", ls.models)
    )
    if len(index) == 1:
        return Plan(TORCH, "torch", folder, index=folder / index[0])
    candidates = [n for n in ls.models if n.endswith(SUFFIXES)]
    if "pytorch_model.bin" in names:
        return Plan(TORCH, "torch", folder, files=[folder / "pytorch_model.bin"])
    shards = ls.only("pytorch_model-*.bin", candidates)  # shards without their index: read as one set
    if shards:
        return Plan(TORCH, "torch", folder, files=[folder / n for n in shards])
    for group in (
        ls.only("mp_rank_*_model_states.pt", candidates),
        ls.only("consolidated*.pth", candidates),
        candidates,
    ):
        if len(group) == 1:
            return Plan(TORCH, "torch", folder, files=[folder / group[0]])
        if len(group) > 1:
            return f"ambiguous: several candidate weight files ({', '.join(group)}); pass the file you mean"
    if len(index) > 1:
        ls.several_indexes += index
    return None


def _open(plan: Plan, trust_pickle: bool) -> TorchSource:
    if plan.index is not None:
        return TorchSource.from_index(plan.index, trust_pickle=trust_pickle)
    if plan.path.is_file():
        return TorchSource.from_file(plan.path, trust_pickle=trust_pickle)
    return TorchSource.from_files(plan.path, plan.files, trust_pickle=trust_pickle)


def _check_complete(plan: Plan) -> None:
    for f in weight_files(plan):
        if file_size(f) == 0:
            raise FormatError("file is empty (0 bytes): truncated or interrupted save", f)
        if is_zip(f) and not zipfile.is_zipfile(f):
            raise FormatError("torch zip file has no central directory: truncated", f)


TORCH = register_format(
    Format(
        name="torch",
        precedence=30,
        looked_for="pytorch_model*.bin[.index.json], *.pt, *.pth, *.ckpt",
        plan_file=_plan_file,
        plan_folder=_plan_folder,
        open=_open,
        check_complete=_check_complete,
        file_suffixes=SUFFIXES,
    )
)
