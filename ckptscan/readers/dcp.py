"""PyTorch Distributed Checkpoint (DCP) folders: ``.metadata`` + ``__<rank>_<n>.distcp`` files.

Read without a process group and without loading the checkpoint: ``.metadata`` is a pickle of
``torch.distributed.checkpoint.metadata.Metadata`` (``FileSystemWriter.finish`` in
torch/distributed/checkpoint/filesystem.py).  It is unpickled with an allow-list of the DCP metadata
classes, ``torch.Size``, dtypes and paths (:class:`_MetadataUnpickler`); anything else is refused, so a
crafted ``.metadata`` cannot run code.

Each tensor is described by ``TensorStorageMetadata`` (dtype, global size, chunks with offsets/sizes);
``storage_data`` maps ``MetadataIndex(fqn, chunk offset)`` to ``_StorageInfo(relative_path, offset,
length)``.  With the default torch_save serialization the bytes at ``offset`` are one ``torch.save``'d
chunk, loaded here with ``torch.load(weights_only=True)``; the chunks of a sharded tensor are pasted
into the full tensor.  Only the wanted tensor's bytes are read.  Nested state dicts appear flattened
with dot-joined names (DCP does that on save).  Non-tensor entries (``BytesStorageMetadata``) are not
listed.  Not supported (clear FormatError): storage transforms/extensions (e.g. compression), the
safetensors-serialized variant, and per-rank ``__<rank>.metadata`` files without a global ``.metadata``.
"""

from __future__ import annotations

import io
import math
import pickle
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import BinaryIO, Protocol, Self, TypeGuard

import torch

from ckptscan.errors import FormatError
from ckptscan.readers._common import backed, dtype_name, file_size, open_binary, safe_member
from ckptscan.readers.base import TensorInfo
from ckptscan.readers.registry import Format, Listing, Plan, register_format

METADATA_FILE = ".metadata"

_DCP_META = "torch.distributed.checkpoint.metadata"
_ALLOWED: dict[str, set[str]] = {
    _DCP_META: {
        "Metadata",
        "TensorStorageMetadata",
        "ChunkStorageMetadata",
        "TensorProperties",
        "BytesStorageMetadata",
        "MetadataIndex",
        "StorageMeta",
        "_MEM_FORMAT_ENCODING",
    },
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo", "_StoragePrefix"},
    # Older torch releases kept TensorProperties here.
    "torch.distributed._shard.sharded_tensor.metadata": {"TensorProperties", "MEM_FORMAT_ENCODING"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},  # dtypes are checked separately below
    "pathlib": {"Path", "PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath"},
    "pathlib._local": {"Path", "PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath"},
    "collections": {"OrderedDict"},
}


# The fields of torch's DCP metadata classes that this reader uses, as it relies on them once
# load_metadata has checked their types (_check_types); torch's classes are imported only on first use.


class ChunkMeta(Protocol):
    """``ChunkStorageMetadata``: where one chunk of a tensor lies."""

    offsets: Sequence[int]
    sizes: Sequence[int]


class TensorPropertiesMeta(Protocol):
    dtype: torch.dtype


class TensorMeta(Protocol):
    """``TensorStorageMetadata``: a tensor's global size, dtype and chunks."""

    size: Sequence[int]
    properties: TensorPropertiesMeta
    chunks: list[ChunkMeta]


class StorageIndex(Protocol):
    """``MetadataIndex``: a tensor name and the offsets of one of its chunks."""

    fqn: str
    offset: Sequence[int] | None


class StorageInfo(Protocol):
    """``_StorageInfo``: the bytes that hold one chunk."""

    relative_path: str
    offset: int
    length: int


class DcpMetadata(Protocol):
    """``Metadata``: tensor (and non-tensor) entries, and where each chunk is stored."""

    state_dict_metadata: dict[str, object]  # TensorStorageMetadata | BytesStorageMetadata
    storage_data: dict[StorageIndex, StorageInfo]


class _MetadataUnpickler(pickle.Unpickler):
    """Resolves only the globals a DCP ``.metadata`` pickle legitimately contains."""

    def __init__(self, file: BinaryIO, path: Path):
        super().__init__(file)
        self._path = path

    def find_class(self, module: str, name: str) -> object:
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if name in _ALLOWED.get(module, ()):
            return super().find_class(module, name)
        raise FormatError(
            f"refusing DCP metadata: it references {module}.{name}, not a DCP metadata class", self._path
        )


def _dcp_metadata_module(path: Path) -> ModuleType:
    """torch's DCP metadata module, imported on first use (it is slow to import and rarely needed)."""
    if not torch.distributed.is_available():
        raise FormatError("this torch build has no torch.distributed, needed to read DCP metadata", path)
    from torch.distributed.checkpoint import filesystem as _fs  # noqa: F401  (defines _StorageInfo)
    from torch.distributed.checkpoint import metadata as dcp_meta

    return dcp_meta


def load_metadata(folder: Path) -> DcpMetadata:
    """Unpickle ``folder/.metadata`` safely; returns torch's ``Metadata`` object."""
    path = folder / METADATA_FILE
    dcp_meta = _dcp_metadata_module(path)

    with open_binary(path) as f:
        try:
            meta = _MetadataUnpickler(f, path).load()
        except FormatError:
            raise
        except Exception as err:
            raise FormatError(f"unreadable DCP metadata ({type(err).__name__}: {err})", path) from err
    if not isinstance(meta, dcp_meta.Metadata) or not isinstance(meta.state_dict_metadata, dict):
        raise FormatError("not a DCP Metadata pickle", path)
    if not isinstance(meta.storage_data, dict):
        raise FormatError("DCP metadata has no storage_data (not written by FileSystemWriter?)", path)
    _check_types(meta, dcp_meta, path)
    return meta


def _ints(v: object, n: int | None = None) -> TypeGuard[tuple[int, ...] | list[int]]:
    """A sequence of non-negative ints (of length ``n`` when given)."""
    return (
        isinstance(v, (tuple, list))
        and (n is None or len(v) == n)
        and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v)
    )


def _check_types(meta: DcpMetadata, dcp_meta: ModuleType, path: Path) -> None:
    """The unpickled objects have the types the reader relies on: an allow-listed class can still carry
    any value in its fields (``chunks=None``, a string size), which would fail far from here."""
    for fqn, md in meta.state_dict_metadata.items():
        if isinstance(md, dcp_meta.TensorStorageMetadata) and not _tensor_ok(fqn, md):
            raise FormatError(
                f"DCP metadata of tensor {str(fqn)[:80]!r} has fields of the wrong type or "
                f"rank (size, dtype, chunks offsets/sizes)",
                path,
            )
    for idx, info in meta.storage_data.items():
        if not _storage_ok(idx, info):
            raise FormatError(
                f"DCP storage entry {str(getattr(idx, 'fqn', idx))[:80]!r} has fields of the "
                f"wrong type (fqn, offset, relative_path, byte offset and length)",
                path,
            )


def _tensor_ok(fqn: object, md: object) -> bool:
    size, chunks = getattr(md, "size", None), getattr(md, "chunks", None)
    dtype = getattr(getattr(md, "properties", None), "dtype", None)
    if not (
        isinstance(fqn, str) and _ints(size) and isinstance(chunks, list) and isinstance(dtype, torch.dtype)
    ):
        return False
    rank = len(size)
    return all(
        _ints(getattr(c, "offsets", None), rank) and _ints(getattr(c, "sizes", None), rank) for c in chunks
    )


def _storage_ok(idx: object, info: object) -> bool:
    offset = getattr(idx, "offset", None)
    return (
        isinstance(getattr(idx, "fqn", None), str)
        and (offset is None or _ints(offset))
        and isinstance(getattr(info, "relative_path", None), str)
        and _ints([getattr(info, "offset", None), getattr(info, "length", None)])
    )


class DcpSource:
    """A ``TensorSource`` over a DCP checkpoint folder."""

    def __init__(self, folder: Path):
        self.path = folder
        self.format = "dcp"
        self._meta_path = folder / METADATA_FILE
        meta = load_metadata(folder)
        dcp_meta = _dcp_metadata_module(self._meta_path)
        self._tensors: dict[str, TensorMeta] = {
            fqn: md
            for fqn, md in meta.state_dict_metadata.items()
            if isinstance(md, dcp_meta.TensorStorageMetadata)
        }
        # (fqn, chunk offsets) -> storage info
        self._storage = {
            (idx.fqn, tuple(idx.offset) if idx.offset is not None else None): info
            for idx, info in meta.storage_data.items()
        }
        self._infos: dict[str, TensorInfo] | None = None

    def _storage_info(self, fqn: str, chunk: ChunkMeta) -> StorageInfo:
        info = self._storage.get((fqn, tuple(chunk.offsets)))
        if info is None:
            raise FormatError(
                f"tensor {fqn!r}: chunk at offsets {list(chunk.offsets)} has no storage entry",
                self._meta_path,
            )
        return info

    def infos(self) -> dict[str, TensorInfo]:
        if self._infos is None:
            out = {}
            for fqn, md in self._tensors.items():
                chunks = sorted(md.chunks, key=lambda c: tuple(c.offsets))
                file = self._storage_info(fqn, chunks[0]).relative_path if chunks else METADATA_FILE
                out[fqn] = TensorInfo(fqn, tuple(md.size), dtype_name(md.properties.dtype), file)
            self._infos = out
        return dict(self._infos)

    def read(self, name: str) -> torch.Tensor:
        md = self._tensors.get(name)
        if md is None:
            raise KeyError(name)
        size, dtype = tuple(md.size), md.properties.dtype
        if math.prod(size) == 0:
            return torch.empty(size, dtype=dtype)
        self._check_chunks(name, md, size, dtype)  # before anything of the declared size is allocated
        if len(md.chunks) == 1:
            return self._load_chunk(name, md.chunks[0], size, dtype)
        full = torch.empty(size, dtype=dtype)
        for chunk in md.chunks:
            offs, sizes = tuple(chunk.offsets), tuple(chunk.sizes)
            where = tuple(slice(o, o + s) for o, s in zip(offs, sizes, strict=False))
            full[where] = self._load_chunk(name, chunk, sizes, dtype)
        return full

    def _check_chunks(self, name: str, md: TensorMeta, size: tuple[int, ...], dtype: torch.dtype) -> None:
        """The chunks lie inside the tensor, cover exactly its elements, and each has at least the bytes
        of its elements stored: the declared size is backed by the files before it is allocated."""
        covered = 0
        itemsize = torch.empty((), dtype=dtype).element_size()
        for chunk in md.chunks:
            offs, sizes = tuple(chunk.offsets), tuple(chunk.sizes)
            if any(o + s > d for o, s, d in zip(offs, sizes, size, strict=False)):
                raise FormatError(
                    f"tensor {name!r}: chunk {list(offs)}+{list(sizes)} lies outside {list(size)}",
                    self._meta_path,
                )
            n = math.prod(sizes)
            stored = self._storage_info(name, chunk).length
            if n * itemsize > stored:
                raise FormatError(
                    f"tensor {name!r}: chunk {list(offs)} of {n} elements is stored in "
                    f"{stored} bytes, fewer than its {n * itemsize}",
                    self._meta_path,
                )
            covered += n
        if covered != math.prod(size):
            raise FormatError(
                f"tensor {name!r}: chunks cover {covered} of {math.prod(size)} elements", self._meta_path
            )

    def _load_chunk(
        self, name: str, chunk: ChunkMeta, sizes: tuple[int, ...], dtype: torch.dtype
    ) -> torch.Tensor:
        info = self._storage_info(name, chunk)
        transforms = getattr(info, "transform_descriptors", None)  # newer torch only
        if transforms:
            raise FormatError(
                f"tensor {name!r}: unsupported DCP storage transform {transforms}",
                self._meta_path,
            )
        path = safe_member(self.path, info.relative_path, self._meta_path)
        if not path.is_file():
            raise FormatError(f"checkpoint incomplete: {info.relative_path} missing", self._meta_path)
        if info.offset < 0 or info.length <= 0 or info.offset + info.length > file_size(path):
            raise FormatError(
                f"tensor {name!r}: bytes {info.offset}..{info.offset + info.length} run past the end of the file",
                path,
            )
        with open_binary(path) as f:
            f.seek(info.offset)
            raw = f.read(info.length)
        try:
            part = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
        except Exception as err:
            raise FormatError(
                f"tensor {name!r}: chunk at byte {info.offset} is not a torch-saved tensor "
                f"({type(err).__name__}; safetensors-serialized DCP is not supported)",
                path,
            ) from err
        if not isinstance(part, torch.Tensor) or tuple(part.shape) != sizes or part.dtype != dtype:
            got = (
                f"{tuple(part.shape)} {part.dtype}" if isinstance(part, torch.Tensor) else type(part).__name__
            )
            raise FormatError(f"tensor {name!r}: stored chunk is {got}, metadata says {sizes} {dtype}", path)
        return backed(part, name, path)

    def close(self) -> None:
        pass  # nothing held open: every read opens, reads and closes its file

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- the format entry (ckptscan/readers/registry.py) -----------------------------------------------


def _plan_file(path: Path) -> Plan | None:
    if path.name == METADATA_FILE or path.name.endswith(".distcp"):
        return Plan(DCP, "dcp", path.parent)
    return None


def _plan_folder(ls: Listing) -> Plan | None:
    if METADATA_FILE in ls.names or ls.only("*.distcp"):
        return Plan(DCP, "dcp", ls.folder)
    return None


def _require_metadata(folder: Path) -> Path:
    meta_path = folder / METADATA_FILE
    if not meta_path.is_file():
        raise FormatError(f"checkpoint incomplete: DCP {METADATA_FILE} missing (save interrupted?)", folder)
    return meta_path


def _open(plan: Plan, trust_pickle: bool) -> DcpSource:
    _require_metadata(plan.path)
    return DcpSource(plan.path)


def _check_complete(plan: Plan) -> None:
    meta_path = _require_metadata(plan.path)
    ends: dict[str, int] = {}
    for info in load_metadata(plan.path).storage_data.values():
        ends[info.relative_path] = max(ends.get(info.relative_path, 0), info.offset + info.length)
    for rel, end in ends.items():
        p = safe_member(plan.path, rel, meta_path)
        if not p.is_file():
            raise FormatError(f"checkpoint incomplete: {rel} missing", meta_path)
        if file_size(p) < end:
            raise FormatError(f"truncated: {file_size(p)} bytes, metadata needs {end}", p)


DCP = register_format(
    Format(
        name="dcp",
        precedence=20,
        looked_for=".metadata/*.distcp (DCP)",
        plan_file=_plan_file,
        plan_folder=_plan_folder,
        open=_open,
        check_complete=_check_complete,
    )
)
