"""Helpers shared by the readers: OS errors as InputError, safe shard paths, index files.

Every reader opens files through :func:`open_binary` / :func:`file_size` so that a permission problem
or a vanished file becomes a one-line ``InputError`` naming the path, never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import BinaryIO

import torch

from ckptscan.errors import FormatError, InputError
from ckptscan.limits import JsonError, check_backed, parse_json


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"`` (the spelling ``TensorInfo.dtype`` uses)."""
    return str(dtype).removeprefix("torch.")


def os_error(path: Path | str, err: OSError) -> InputError:
    """An OSError as the user-facing InputError: path plus the OS message (no errno noise)."""
    return InputError(f"cannot read: {err.strerror or err}", path)


@contextmanager
def open_binary(path: Path) -> Iterator[BinaryIO]:
    """``open(path, "rb")`` with OS failures turned into InputError.  Read-only: evidence is never written."""
    try:
        with open(path, "rb") as f:
            yield f
    except OSError as err:  # raised by open() or by a read in the caller's block: same file, same message
        raise os_error(path, err) from err


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as err:
        raise os_error(path, err) from err


def file_stat(path: Path) -> tuple[int, int]:
    """(size, mtime in ns): what tells a file that was re-saved while it was read."""
    try:
        st = path.stat()
    except OSError as err:
        raise os_error(path, err) from err
    return st.st_size, st.st_mtime_ns


def check_unchanged(path: Path, before: tuple[int, int]) -> None:
    """FormatError when ``path`` is no longer the file whose ``file_stat`` was ``before``."""
    if file_stat(path) != before:
        raise FormatError(
            "file changed while it was being read (its size or mtime differ from when it was "
            "opened): re-saved in place?",
            path,
        )


def backed(t: torch.Tensor, name: str, path: Path) -> torch.Tensor:
    """``t`` when it holds the bytes its shape claims (``limits.check_backed``), else FormatError."""
    why = check_backed(t)
    if why is not None:
        raise FormatError(f"tensor {name!r} {why}", path)
    return t


def safe_member(folder: Path, rel: object, index_file: Path) -> Path:
    """Resolve a shard name taken from an index file, refusing anything outside ``folder``.

    An index is data from the evidence; a name like ``../../etc/x`` or ``/abs/x`` must not make us read
    elsewhere.  The check is lexical (no symlink resolution) on purpose: Hugging Face cache snapshots
    legitimately symlink shards to ``../../blobs/<hash>``, and that link lives inside the folder.
    """
    if not isinstance(rel, str) or not rel:
        raise FormatError(f"index names an invalid shard file {rel!r}", index_file)
    if PurePosixPath(rel).is_absolute() or PureWindowsPath(rel).is_absolute() or PureWindowsPath(rel).drive:
        raise FormatError(f"index names an absolute shard path {rel!r} (refused)", index_file)
    parts = rel.replace("\\", "/").split("/")
    if any(p == ".." for p in parts):
        raise FormatError(
            f"index names shard path {rel!r} outside the checkpoint folder (refused)", index_file
        )
    return folder / Path(*[p for p in parts if p not in ("", ".")])


def load_weight_map(index_file: Path) -> dict[str, str]:
    """The ``weight_map`` (tensor name -> shard file) of a Hugging Face ``*.index.json``, validated."""
    with open_binary(index_file) as f:
        raw = f.read()
    try:
        doc = parse_json(raw)
    except JsonError as err:
        raise FormatError(f"index {err}", index_file) from None
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise FormatError("index has no 'weight_map' object (name -> shard file)", index_file)
    for name, shard in weight_map.items():
        if not isinstance(shard, str):
            raise FormatError(f"index maps tensor {name!r} to a non-string shard {shard!r}", index_file)
    return weight_map


def check_shards(folder: Path, weight_map: dict[str, str], index_file: Path) -> dict[str, Path]:
    """Validate every shard path named by an index; returns {shard name: path}.  Missing -> FormatError."""
    shards: dict[str, Path] = {}
    for rel in dict.fromkeys(weight_map.values()):
        p = safe_member(folder, rel, index_file)
        try:
            present = p.is_file()
        except OSError as err:  # a name too long for the file system, a loop...
            raise FormatError(f"index names shard {rel[:80]!r}: {err.strerror or err}", index_file) from err
        if not present:
            raise FormatError(f"checkpoint incomplete: shard {rel} missing", index_file)
        shards[rel] = p
    return shards


def rel_name(folder: Path, file: Path) -> str:
    """The file name relative to the checkpoint folder, for ``TensorInfo.file`` and messages."""
    try:
        return os.path.relpath(file, folder) if folder != file else file.name
    except ValueError:  # different drives on Windows
        return str(file)
