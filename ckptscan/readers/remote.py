"""Checkpoints in object storage (``s3://``, ``gs://``, ``hf://``, any fsspec URL), read with
ranged requests only: a safetensors file's header with two small reads (its 8-byte length, then
the header), and each tensor asked for with one read of exactly its bytes; a file is never
downloaded whole.  Nothing is ever written to the remote side.

``fsspec`` (and the file system of the URL's scheme: ``s3fs``, ``gcsfs``) is imported here only:
the ``ckptscan[s3]`` / ``ckptscan[gcs]`` extras.  Credentials come the usual way for each file
system (environment, profile, instance metadata); an S3-compatible endpoint is ``AWS_ENDPOINT_URL``
or ``storage_options={"endpoint_url": ...}``.  URLs are shown by ``redact`` only: no user info, no
query string (where a presigned URL keeps its signature).
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections import OrderedDict
from pathlib import Path, PurePosixPath
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import torch

from ckptscan.errors import FormatError, InputError, UsageError
from ckptscan.readers.base import TensorInfo
from ckptscan.readers.safetensors_ import DTYPES, Header, _torch_dtype, header_of


def is_url(path: object) -> bool:
    """A run or checkpoint given as a URL (``scheme://...``) rather than a local path."""
    return "://" in str(path)


def redact(url: str) -> str:
    """``url`` as it may be shown: without user info (``user:secret@``), query or fragment."""
    parts = urlsplit(str(url))
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _scrub(text: str, url: str) -> str:
    """``text`` (a file system's error) without the URL's user info or query string."""
    parts = urlsplit(str(url))
    for secret in (parts.password, parts.username, parts.query):
        if secret:
            text = text.replace(secret, "***")
    return text


def _fs(url: str, storage_options: dict | None):
    try:
        import fsspec
    except ImportError:
        raise UsageError(
            f'{redact(url)}: reading object storage needs fsspec: pip install "ckptscan[s3]" (or [gcs])'
        ) from None
    try:
        return fsspec.core.url_to_fs(url, **(storage_options or {}))
    except (ImportError, ValueError) as e:  # no file system for the scheme, or its package missing
        raise UsageError(f"{redact(url)}: {e}") from None


# ranged reads kept in this process (least recently used first out), so that a tensor read twice (by
# two monitor families, or as the next checkpoint's previous one) is fetched once
CACHE_BYTES = int(os.environ.get("CKPTSCAN_REMOTE_CACHE_MB", "1024")) * 2**20
_CACHE: OrderedDict[tuple[str, str, int, int, int], bytes] = OrderedDict()
_cache_lock = threading.Lock()


def _remember(key: tuple[str, str, int, int, int], data: bytes) -> None:
    if len(data) > CACHE_BYTES:
        return
    with _cache_lock:
        _CACHE[key] = data
        total = sum(len(v) for v in _CACHE.values())
        while total > CACHE_BYTES and _CACHE:
            total -= len(_CACHE.popitem(last=False)[1])


def clear_cache() -> None:
    with _cache_lock:
        _CACHE.clear()


class RemoteFile:
    """One object, read by byte ranges (``fs.cat_file(path, start, end)``); ``bytes_read`` counts
    what was asked for."""

    def __init__(self, fs: Any, path: str, url: str):
        self.fs, self.path, self.url = fs, path, redact(url)
        try:
            info = fs.info(path)
        except FileNotFoundError:
            raise InputError("no such object", self.url) from None
        except OSError as e:
            raise InputError(f"cannot read: {e}", self.url) from None
        self.size = int(info["size"])
        self.version = info.get("ETag") or info.get("etag") or info.get("mtime")  # what tells a re-save
        self.bytes_read = 0
        self._lock = threading.Lock()

    def read(self, offset: int, n: int) -> bytes:
        if n <= 0:
            return b""
        key = (self.url, str(self.version), self.size, offset, n)
        hit = _CACHE.get(key)
        if hit is not None:  # read again (the previous checkpoint, another family): not fetched again
            _CACHE.move_to_end(key)
            return hit
        try:
            data = self.fs.cat_file(self.path, start=offset, end=offset + n)
        except OSError as e:
            raise InputError(f"cannot read bytes {offset}..{offset + n}: {e}", self.url) from None
        with self._lock:
            self.bytes_read += len(data)
        if len(data) != n:
            raise FormatError(
                f"bytes {offset}..{offset + n}: got {len(data)} (changed or truncated?)", self.url
            )
        _remember(key, data)
        return data


class RemoteSafetensorsSource:
    """A ``TensorSource`` over safetensors objects at a URL: one file, or the ``*.safetensors`` of a
    checkpoint folder (several files, or a Hugging Face index)."""

    format = "safetensors"

    def __init__(self, url: str, storage_options: dict | None = None):
        self.url = url
        self.path = redact(url)  # what messages name
        self.fs, root = _fs(url, storage_options)
        root = root.rstrip("/")
        if root.endswith(".safetensors"):
            names = [root]
        else:
            try:
                listing = sorted(self.fs.ls(root, detail=False))
            except FileNotFoundError:
                raise InputError("no such folder", self.path) from None
            names = [p for p in listing if p.endswith(".safetensors")]
            if not names:
                raise InputError("no .safetensors files here", self.path)
            self.format = "safetensors" if len(names) == 1 else "safetensors-sharded"
        self._files: dict[str, RemoteFile] = {}
        self._headers: dict[str, Header] = {}
        self._where: dict[str, str] = {}  # tensor name -> file name
        for p in names:
            rel = PurePosixPath(p).name
            f = RemoteFile(self.fs, p, f"{url.rstrip('/')}/{rel}" if p != root else url)
            self._files[rel], self._headers[rel] = f, header_of(f.url, f.size, f.read)
            for name in self._headers[rel].entries:
                if name in self._where:
                    raise FormatError(
                        f"tensor {name!r} appears in both {self._where[name]} and {rel}", self.path
                    )
                self._where[name] = rel

    @property
    def bytes_read(self) -> int:
        return sum(f.bytes_read for f in self._files.values())

    @property
    def size(self) -> int:
        return sum(f.size for f in self._files.values())

    def identity(self) -> dict[str, list]:
        """File name -> [size, version (ETag or mtime)]: what tells a re-saved checkpoint."""
        return {rel: [f.size, f.version] for rel, f in self._files.items()}

    def infos(self) -> dict[str, TensorInfo]:
        return {
            name: TensorInfo(name, e.shape, DTYPES[e.code][0], rel)
            for rel, h in self._headers.items()
            for name, e in h.entries.items()
        }

    def read(self, name: str) -> torch.Tensor:
        rel = self._where.get(name)
        if rel is None:
            raise KeyError(name)
        h, f = self._headers[rel], self._files[rel]
        e = h.entries[name]
        dt = _torch_dtype(e.code)
        if dt is None:
            raise FormatError(
                f"tensor {name!r}: dtype {e.code} is not supported by torch {torch.__version__}", f.url
            )
        if math.prod(e.shape) == 0:
            return torch.empty(e.shape, dtype=dt)
        raw = f.read(h.data_start + e.begin, e.end - e.begin)
        buf = np.frombuffer(bytearray(raw), dtype=np.uint8)  # writable memory the tensor owns
        return torch.from_numpy(buf).view(dt).reshape(e.shape)

    def close(self) -> None:
        self._files.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_json(url: str, storage_options: dict | None = None) -> Any:
    """A small JSON object (a config.json) at ``url``."""
    fs, path = _fs(url, storage_options)
    try:
        return json.loads(fs.cat_file(path))
    except FileNotFoundError:
        return None


# --- a whole run at a URL (``ckptscan analyze s3://bucket/run``) -------------------------------
#
# The seam: the run's tree is listed once (``fs.find``) and laid out as a local *mirror* inside the
# output folder: every folder, the small files read whole (config.json, logs, trainer_state.json,
# index files, replay files), and each weight file as an empty placeholder that only carries its
# name.  Discovery, the framework table, config and log search then run unchanged over the mirror;
# the readers (``readers/__init__.py``) see that a checkpoint lies in a mounted mirror and open it at
# its URL with ranged reads instead.  The mirror is never read as weights.

SMALL_MAX = 64 * 2**20  # a non-weight file up to this size is read whole into the mirror
_WEIGHT_SUFFIXES = (".safetensors", ".distcp", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".npz", ".nemo")
MANIFEST = "manifest.json"  # in the mirror's folder: rel path -> [size, version] of each copied file
REMOTE_ONLY_SAFETENSORS = "remote runs: only safetensors checkpoints are read over fsspec"


def _is_weight_name(name: str) -> bool:
    from ckptscan.readers.registry import file_suffixes

    return name.endswith(_WEIGHT_SUFFIXES + file_suffixes())


class Mount:
    """A run at ``url`` mirrored at ``root`` (a local folder inside the output folder)."""

    def __init__(self, url: str, root: Path, storage_options: dict | None = None):
        parts = urlsplit(url)  # a run's URL names a folder: a query string is dropped
        self.url = urlunsplit(parts._replace(query="", fragment="")).rstrip("/")
        self.shown = redact(self.url)
        self.root = root
        self.storage_options = storage_options
        self.fs, self.base = _fs(self.url, storage_options)
        self.base = self.base.rstrip("/")
        self.copied_bytes = 0  # bytes of small files read whole by this mirror

    def url_of(self, path: Path) -> str:
        rel = Path(path).resolve().relative_to(self.root.resolve()).as_posix()
        return self.url if rel == "." else f"{self.url}/{rel}"

    def shown_of(self, path: Path) -> str:
        return redact(self.url_of(path))

    def sync(self) -> None:
        """List the run and lay out the mirror (small files copied when new or changed remotely)."""
        try:
            found = self.fs.find(self.base, detail=True)
        except FileNotFoundError:
            raise InputError("no such run (nothing listed there)", self.shown) from None
        except Exception as e:  # noqa: BLE001 -- a file system's own error, told without secrets
            raise InputError(f"cannot list: {_scrub(str(e), self.url)}", self.shown) from None
        if not found:
            raise InputError("no such run (nothing listed there)", self.shown)
        manifest_file = self.root.parent / MANIFEST
        try:
            manifest = json.loads(manifest_file.read_text())
        except (OSError, ValueError):
            manifest = {}
        new: dict[str, list] = {}
        self.root.mkdir(parents=True, exist_ok=True)
        for path, info in sorted(found.items()):
            if info.get("type") == "directory":
                continue
            rel = PurePosixPath(path).relative_to(self.base).as_posix()
            if any(part in ("", ".", "..") for part in rel.split("/")):
                continue  # an object name that is no safe local path
            local = self.root / rel
            local.parent.mkdir(parents=True, exist_ok=True)
            size = int(info.get("size") or 0)
            version = info.get("ETag") or info.get("etag") or info.get("mtime")
            stamp = [size, str(version) if version is not None else None]
            if _is_weight_name(local.name) or size > SMALL_MAX:
                if not local.exists() or local.stat().st_size:
                    local.write_bytes(b"")  # a placeholder: its name is all discovery needs
                new[rel] = [*stamp, "placeholder"]
                continue
            if manifest.get(rel) != stamp or not local.is_file():
                try:
                    data = self.fs.cat_file(path)
                except OSError as e:
                    raise InputError(f"cannot read: {e}", redact(f"{self.url}/{rel}")) from None
                self.copied_bytes += len(data)
                tmp = local.with_name(local.name + ".ckptscan-tmp")
                tmp.write_bytes(data)
                tmp.replace(local)
            new[rel] = stamp
        manifest_file.write_text(json.dumps(new, indent=1, sort_keys=True))


_MOUNTS: dict[Path, Mount] = {}


def mount(url: str, root: Path, storage_options: dict | None = None) -> Mount:
    """Mirror the run at ``url`` at ``root`` and register it for the readers (``unmount`` after)."""
    m = Mount(url, root, storage_options)
    m.sync()
    _MOUNTS[root.resolve()] = m
    return m


def unmount(m: Mount) -> None:
    _MOUNTS.pop(m.root.resolve(), None)
    clear_cache()


def mounted(path: Path | str) -> Mount | None:
    """The mount whose mirror holds ``path``, if any."""
    if not _MOUNTS:
        return None
    p = Path(path).resolve()
    for root, m in _MOUNTS.items():
        if p == root or root in p.parents:
            return m
    return None


def open_mounted(m: Mount, plan_format: str, path: Path, files: list[Path]) -> RemoteSafetensorsSource:
    """The checkpoint at ``path`` of a mirror opened at its URL; only safetensors are read."""
    if not plan_format.startswith("safetensors"):
        names = ", ".join(sorted({f.name for f in files})) or Path(path).name
        raise FormatError(f"{REMOTE_ONLY_SAFETENSORS} (found {plan_format}: {names})", m.shown_of(path))
    target = files[0] if len(files) == 1 else path  # one file: only it (a folder: its *.safetensors)
    return RemoteSafetensorsSource(m.url_of(target), m.storage_options)
