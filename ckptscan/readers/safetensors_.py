"""safetensors reader: single files, several files, and Hugging Face sharded indexes.

The header (8-byte little-endian length, then JSON) is parsed here rather than by the ``safetensors``
package so that every defect of a broken or truncated file gets a precise one-line message (which
tensor, which bytes).  Reading one tensor reads only that tensor's bytes, with a positioned read into
memory the tensor owns (never a memory map of the evidence: see ``SafetensorsFile``), so the file can
never be modified through a returned tensor.
"""

from __future__ import annotations

import io
import itertools
import math
import os
import re
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Self

import numpy as np
import torch

from ckptscan.errors import FormatError
from ckptscan.limits import JsonError, parse_json
from ckptscan.readers._common import (
    check_shards,
    file_size,
    load_weight_map,
    open_binary,
    os_error,
    rel_name,
)
from ckptscan.readers.base import TensorInfo
from ckptscan.readers.registry import Format, Listing, Plan, register_format, weight_files

# safetensors dtype code -> (torch dtype name, bytes per element).  A code torch lacks in this
# version (e.g. an older torch without float8) is still parsed and listed; only reading it fails.
DTYPES: dict[str, tuple[str, int]] = {
    "F64": ("float64", 8),
    "F32": ("float32", 4),
    "F16": ("float16", 2),
    "BF16": ("bfloat16", 2),
    "I64": ("int64", 8),
    "I32": ("int32", 4),
    "I16": ("int16", 2),
    "I8": ("int8", 1),
    "U64": ("uint64", 8),
    "U32": ("uint32", 4),
    "U16": ("uint16", 2),
    "U8": ("uint8", 1),
    "BOOL": ("bool", 1),
    "F8_E4M3": ("float8_e4m3fn", 1),
    "F8_E5M2": ("float8_e5m2", 1),
    "F8_E8M0": ("float8_e8m0fnu", 1),
}

# The reference implementation refuses headers above 100 MB; a bigger "length" is a corrupt file.
MAX_HEADER_BYTES = 100_000_000


@dataclass(frozen=True)
class _Entry:
    code: str  # safetensors dtype code, e.g. "BF16"
    shape: tuple[int, ...]
    begin: int  # byte offsets relative to the start of the data section
    end: int


@dataclass(frozen=True)
class Header:
    data_start: int  # absolute offset of the data section (8 + header length)
    data_size: int  # bytes after the header
    entries: dict[str, _Entry]


def parse_header(path: Path) -> Header:
    """Read and fully validate the header of one safetensors file (no tensor data read)."""
    size = file_size(path)
    with open_binary(path) as f:

        def read(offset: int, n: int) -> bytes:
            f.seek(offset)
            return f.read(n)

        return header_of(path, size, read)


def header_of(path: Path | str, size: int, read) -> Header:
    """The validated header of a safetensors file of ``size`` bytes whose bytes ``read(offset, n)``
    returns: two reads, the 8-byte length and the header (the seam a remote reader shares,
    ``readers/remote.py``)."""
    if size < 8:
        raise FormatError(
            f"file is only {size} bytes, shorter than the 8-byte safetensors header length", path
        )
    (n,) = struct.unpack("<Q", read(0, 8))
    if n > size - 8:
        raise FormatError(
            f"header length {n} runs past the end of the file ({size} bytes): truncated or not safetensors",
            path,
        )
    if n > MAX_HEADER_BYTES:
        raise FormatError(f"header length {n} exceeds {MAX_HEADER_BYTES} bytes: corrupt file", path)
    raw = read(8, n)
    try:
        doc = parse_json(raw, unique_keys=True)
    except JsonError as err:
        raise FormatError(f"header {err}", path) from None
    if not isinstance(doc, dict):
        raise FormatError("header JSON is not an object", path)
    data_size = size - 8 - n
    entries = {
        name: _parse_entry(path, name, spec, data_size)
        for name, spec in doc.items()
        if name != "__metadata__"
    }
    _check_overlaps(path, entries)
    return Header(data_start=8 + n, data_size=data_size, entries=entries)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _parse_entry(path: Path | str, name: str, spec: object, data_size: int) -> _Entry:
    if not isinstance(spec, dict):
        raise FormatError(f"tensor {name!r}: header entry is not an object", path)
    code, shape, offsets = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
    if not isinstance(code, str) or code not in DTYPES:
        raise FormatError(f"tensor {name!r} has unknown dtype {code!r}", path)
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise FormatError(f"tensor {name!r} has an invalid shape {shape!r}", path)
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
        raise FormatError(f"tensor {name!r} has invalid data_offsets {offsets!r}", path)
    begin, end = offsets
    if not 0 <= begin <= end:
        raise FormatError(f"tensor {name!r} has invalid data_offsets [{begin}, {end}]", path)
    if end > data_size:
        raise FormatError(
            f"tensor {name!r} (bytes {begin}..{end}) runs past the end of the data section "
            f"({data_size} bytes): truncated file?",
            path,
        )
    need = math.prod(shape) * DTYPES[code][1]
    if end - begin != need:
        raise FormatError(
            f"tensor {name!r} spans {end - begin} bytes but shape {shape} of {code} needs {need}", path
        )
    return _Entry(code, tuple(shape), begin, end)


def _check_overlaps(path: Path | str, entries: dict[str, _Entry]) -> None:
    spans = sorted((e.begin, e.end, name) for name, e in entries.items() if e.end > e.begin)
    for (b0, e0, n0), (b1, e1, n1) in itertools.pairwise(spans):
        if b1 < e0:
            raise FormatError(
                f"tensors {n0!r} (bytes {b0}..{e0}) and {n1!r} (bytes {b1}..{e1}) overlap", path
            )


def _torch_dtype(code: str) -> torch.dtype | None:
    dt = getattr(torch, DTYPES[code][0], None)
    return dt if isinstance(dt, torch.dtype) else None


class SafetensorsFile:
    """One parsed safetensors file; tensors are read with positioned reads into memory they own.

    Not memory-mapped: a mapped file that another process truncates or rewrites in place (a trainer
    re-saving a checkpoint) kills the reader with SIGBUS on its next access.  A read instead sees the
    file end early or its size or mtime change, and says so (``FormatError``)."""

    def __init__(self, path: Path):
        self.path = path
        self.header = parse_header(path)
        self._file: io.FileIO | None = None
        self._stat: tuple[int, int] | None = None
        self._lock = threading.Lock()  # the prefetch thread and the caller may read one file

    def dtype_name(self, name: str) -> str:
        return DTYPES[self.header.entries[name].code][0]

    def read(self, name: str) -> torch.Tensor:
        e = self.header.entries[name]
        dt = _torch_dtype(e.code)
        if dt is None:
            raise FormatError(
                f"tensor {name!r}: dtype {e.code} is not supported by torch {torch.__version__}", self.path
            )
        if math.prod(e.shape) == 0:
            return torch.empty(e.shape, dtype=dt)
        buf = np.empty(e.end - e.begin, dtype=np.uint8)  # numpy's allocations are aligned for any dtype
        self._read_into(buf, self.header.data_start + e.begin)
        return torch.from_numpy(buf).view(dt).reshape(e.shape)

    def _read_into(self, buf: np.ndarray, offset: int) -> None:
        view = buf.data  # a writable byte view of the (1-D, uint8) array
        with self._lock:
            f = self._open()
            try:
                f.seek(offset)
                got = 0
                while got < len(view):
                    n = f.readinto(view[got:])
                    if not n:
                        break
                    got += n
                stat = _stat(f)
            except OSError as err:
                raise os_error(self.path, err) from err
        if got < len(view) or stat != self._stat:
            raise FormatError(
                "file changed while it was being read (its size or mtime differ from when its "
                "header was read): re-saved in place?",
                self.path,
            )

    def _open(self) -> io.FileIO:
        if self._file is None:
            try:
                f = open(self.path, "rb", buffering=0)  # noqa: SIM115 (kept open until close()); read-only
            except OSError as err:
                raise os_error(self.path, err) from err
            stat = _stat(f)
            if stat[0] != self.header.data_start + self.header.data_size:
                f.close()
                raise FormatError("file changed size since its header was read", self.path)
            self._file, self._stat = f, stat
        return self._file

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _stat(f: BinaryIO) -> tuple[int, int]:
    st = os.fstat(f.fileno())
    return st.st_size, st.st_mtime_ns


class SafetensorsSource:
    """A ``TensorSource`` over one or several safetensors files, optionally driven by an index.

    ``files`` maps a name relative to ``folder`` to its path.  With ``weight_map`` (from
    ``model.safetensors.index.json``) the index decides which file holds which tensor; without it the
    files' headers do, and a tensor name found in two files is an error.
    """

    def __init__(
        self,
        path: Path,
        folder: Path,
        files: dict[str, Path],
        weight_map: dict[str, str] | None = None,
        fmt: str = "safetensors",
    ):
        self.path = path
        self.format = fmt
        self._folder = folder
        self._files = files
        self._weight_map = weight_map
        self._open: dict[str, SafetensorsFile] = {}
        self._infos: dict[str, TensorInfo] | None = None

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def from_file(cls, file: Path) -> SafetensorsSource:
        return cls(file, file.parent, {file.name: file})

    @classmethod
    def from_files(cls, folder: Path, files: list[Path]) -> SafetensorsSource:
        fmt = "safetensors" if len(files) == 1 else "safetensors-sharded"
        return cls(folder, folder, {rel_name(folder, f): f for f in files}, fmt=fmt)

    @classmethod
    def from_index(cls, index_file: Path) -> SafetensorsSource:
        folder = index_file.parent
        weight_map = load_weight_map(index_file)
        files = check_shards(folder, weight_map, index_file)
        return cls(folder, folder, files, weight_map, fmt="safetensors-sharded")

    # -- TensorSource -------------------------------------------------------------------------
    def _file(self, rel: str) -> SafetensorsFile:
        if rel not in self._open:
            self._open[rel] = SafetensorsFile(self._files[rel])
        return self._open[rel]

    def infos(self) -> dict[str, TensorInfo]:
        if self._infos is None:
            self._infos = self._collect()
        return dict(self._infos)

    def _collect(self) -> dict[str, TensorInfo]:
        out: dict[str, TensorInfo] = {}
        if self._weight_map is not None:
            for name, rel in self._weight_map.items():
                out[name] = self._info(name, rel)
            return out
        for rel in self._files:
            for name in self._file(rel).header.entries:
                if name in out:
                    raise FormatError(
                        f"tensor {name!r} appears in both {out[name].file} and {rel}", self.path
                    )
                out[name] = self._info(name, rel)
        return out

    def _info(self, name: str, rel: str) -> TensorInfo:
        f = self._file(rel)
        e = f.header.entries.get(name)
        if e is None:
            raise FormatError(f"tensor {name!r} is listed in the index but missing from this shard", f.path)
        return TensorInfo(name=name, shape=e.shape, dtype=f.dtype_name(name), file=rel)

    def read(self, name: str) -> torch.Tensor:
        if self._weight_map is not None:
            rel = self._weight_map.get(name)
        else:
            info = self.infos().get(name)
            rel = info.file if info else None
        if rel is None:
            raise KeyError(name)
        f = self._file(rel)
        if name not in f.header.entries:
            raise FormatError(f"tensor {name!r} is listed in the index but missing from this shard", f.path)
        return f.read(name)

    def close(self) -> None:
        for f in self._open.values():
            f.close()
        self._open.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- the format entry (ckptscan/readers/registry.py) -----------------------------------------------

# shards as save_pretrained names them; their index is written after the last shard
_SHARD = re.compile(r".+-\d+-of-\d+\.safetensors")


def _plan_file(path: Path) -> Plan | None:
    if path.name.endswith(".safetensors.index.json"):
        return Plan(SAFETENSORS, "safetensors-sharded", path.parent, index=path)
    if path.name.endswith(".safetensors"):
        return Plan(SAFETENSORS, "safetensors", path, files=[path])
    return None


def _plan_folder(ls: Listing) -> Plan | None:
    index = (
        ["model.safetensors.index.json"]
        if "model.safetensors.index.json" in ls.names
        else ls.only("*.safetensors.index.json", ls.models)
    )
    if len(index) == 1:
        return Plan(SAFETENSORS, "safetensors-sharded", ls.folder, index=ls.folder / index[0])
    files = ["model.safetensors"] if "model.safetensors" in ls.names else ls.only("*.safetensors", ls.models)
    if files:
        name = "safetensors" if len(files) == 1 else "safetensors-sharded"
        return Plan(SAFETENSORS, name, ls.folder, files=[ls.folder / n for n in files])
    if len(index) > 1:
        ls.several_indexes += index
    return None


def _open(plan: Plan, trust_pickle: bool) -> SafetensorsSource:
    if plan.index is not None:
        return SafetensorsSource.from_index(plan.index)
    if plan.path.is_file():
        return SafetensorsSource.from_file(plan.path)
    return SafetensorsSource.from_files(plan.path, plan.files)


def _check_complete(plan: Plan) -> None:
    for f in weight_files(plan):
        parse_header(f)


def _unfinished(names: set[str]) -> str:
    shards = [n for n in names if _SHARD.fullmatch(n)]
    if shards and not any(n.endswith(".safetensors.index.json") for n in names):
        return f"{len(shards)} safetensors shards but no index yet (it is written after the last shard)"
    return ""


SAFETENSORS = register_format(
    Format(
        name="safetensors",
        precedence=10,
        looked_for="*.safetensors[.index.json]",
        plan_file=_plan_file,
        plan_folder=_plan_folder,
        open=_open,
        check_complete=_check_complete,
        file_suffixes=(".safetensors",),
        unfinished=_unfinished,
    )
)
