"""The result store: per-checkpoint parts while analysing, one columnar HDF5 timeline at the end.

Layout of an output folder (never inside the run directory):

    <out>/parts/step_<step>.npz     one per analysed checkpoint, written atomically (tmp + rename);
                                    holds every monitor's [layers, K] array and the checkpoint's
                                    identity, so a re-run reuses it if the checkpoint is unchanged
    <out>/timeline.h5               all parts assembled: /steps [N], /monitors/<name> [N, L, K], and
                                    /scores/<name> [N, L]: the score the detector gave each layer
    <out>/summary.json              the verdict and everything scripts read (schema ckptscan/1)

``Timeline`` is the in-memory, read-only view that detection and reports use: ``steps`` and
``get(name) -> float array [N, L, K]`` (NaN where a value is undefined: first checkpoint for
pair monitors, layers without a router, a skipped replay file).
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ckptscan.errors import OutputError

TIMELINE_FORMAT = "ckptscan-timeline/1"


@dataclass
class Timeline:
    steps: np.ndarray  # int64 [N], ascending
    series: dict[str, np.ndarray]  # name -> float32 [N, L, K]
    meta: dict = field(default_factory=dict)
    scores: dict[str, np.ndarray] = field(
        default_factory=dict
    )  # name -> float32 [N, L]: the detector's scores

    def names(self) -> list[str]:
        return sorted(self.series)

    def get(self, name: str) -> np.ndarray:
        return self.series[name]

    def __contains__(self, name: str) -> bool:
        return name in self.series

    @classmethod
    def from_arrays(cls, steps, series: dict[str, np.ndarray], meta: dict | None = None) -> Timeline:
        steps = np.asarray(steps, dtype=np.int64)
        out = {}
        for k, v in series.items():
            v = np.asarray(v, dtype=np.float32)
            if v.ndim == 1:
                v = v[:, None, None]
            elif v.ndim == 2:
                v = v[:, :, None]
            if v.shape[0] != len(steps):
                raise ValueError(f"series {k!r} has {v.shape[0]} rows for {len(steps)} steps")
            out[k] = v
        return cls(steps, out, dict(meta or {}))

    # --- persistence ------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        import h5py

        def write(tmp: Path) -> None:
            with h5py.File(tmp, "w") as f:
                f.attrs["format"] = TIMELINE_FORMAT
                f.attrs["meta"] = json.dumps(self.meta)
                f.create_dataset("steps", data=self.steps)
                g = f.create_group("monitors")
                for name, arr in self.series.items():
                    g.create_dataset(name, data=arr, compression="gzip", compression_opts=4, shuffle=True)
                sg = f.create_group("scores")
                for name, arr in self.scores.items():
                    sg.create_dataset(
                        name,
                        data=np.asarray(arr, dtype=np.float32),
                        compression="gzip",
                        compression_opts=4,
                        shuffle=True,
                    )

        atomic_write(path, writer=write)

    @classmethod
    def load(cls, path: Path) -> Timeline:
        import h5py

        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != TIMELINE_FORMAT:
                raise ValueError(f"{path}: not a ckptscan timeline")
            meta = json.loads(f.attrs.get("meta", "{}"))
            steps = f["steps"][()]
            series = {name: ds[()] for name, ds in f["monitors"].items()}
            scores = {name: ds[()] for name, ds in f["scores"].items()} if "scores" in f else {}
        return cls(steps, series, meta, scores)


def atomic_write(path: Path, data: bytes | str | None = None, writer=None) -> None:
    """Write a file so that readers see the old or the new content, never a torn one.  A file system
    that refuses the write (read-only, full, no permission) is an ``OutputError`` naming the path."""
    path = Path(path)
    try:
        _atomic_write(path, data, writer)
    except OSError as err:
        raise OutputError(f"cannot write: {err.strerror or err}", path) from err


def make_dir(path: Path) -> None:
    """``mkdir -p`` for an output folder, an ``OutputError`` naming it when the file system refuses."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"cannot create the output folder: {err.strerror or err}", path) from err


def _atomic_write(path: Path, data: bytes | str | None, writer) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if writer is not None:
            os.close(fd)
            writer(Path(tmp))
        else:
            with os.fdopen(fd, "wb") as f:
                if data is None:  # as f.write(None) would: the temporary file is removed below
                    raise TypeError("atomic_write needs data or a writer")
                f.write(data.encode() if isinstance(data, str) else data)
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:  # gone already, or the file system refuses even that: the first error counts
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def save_part(path: Path, identity: dict, values: dict[str, np.ndarray], extra: dict | None = None) -> None:
    """One checkpoint's results: monitor arrays plus the identity that makes them reusable."""
    buf = io.BytesIO()
    arrays = {f"m:{k}": np.asarray(v, dtype=np.float32) for k, v in values.items()}
    for k, v in (extra or {}).items():
        arrays[f"x:{k}"] = np.asarray(v)
    arrays["identity"] = np.frombuffer(json.dumps(identity, sort_keys=True).encode(), dtype=np.uint8)
    np.savez(buf, allow_pickle=True, **arrays)  # numpy's default, named: no array is taken for it
    atomic_write(path, buf.getvalue())


def load_part(path: Path) -> tuple[dict, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(identity, monitor values, extras) of a part file; raises ValueError if it is unreadable."""
    try:
        with np.load(path, allow_pickle=False) as z:
            identity = json.loads(bytes(z["identity"]).decode())
            values = {k[2:]: z[k] for k in z.files if k.startswith("m:")}
            extra = {k[2:]: z[k] for k in z.files if k.startswith("x:")}
    except Exception as e:  # a torn or foreign file: treat as absent, it will be recomputed
        raise ValueError(f"{path}: unreadable part file ({e})") from e
    return identity, values, extra


def assemble(steps: list[int], parts: list[dict[str, np.ndarray]], meta: dict | None = None) -> Timeline:
    """Stack per-checkpoint parts into [N, L, K] series; missing values become NaN.

    L and K are the maxima over parts, so a checkpoint missing some layers still fits.
    """
    names = sorted({n for p in parts for n in p})
    series = {}
    for name in names:
        shapes = [p[name].shape for p in parts if name in p]
        n_l = max(s[0] for s in shapes)
        n_k = max(s[1] for s in shapes)
        arr = np.full((len(parts), n_l, n_k), np.nan, dtype=np.float32)
        for i, p in enumerate(parts):
            if name in p:
                v = p[name]
                arr[i, : v.shape[0], : v.shape[1]] = v
        series[name] = arr
    return Timeline(np.asarray(steps, dtype=np.int64), series, dict(meta or {}))
