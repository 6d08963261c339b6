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
import threading
from pathlib import PurePosixPath
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
