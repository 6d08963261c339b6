"""The replay-file contract (docs/replay.md): one HDF5 file of recorded activations per checkpoint.

The activation-side monitors need the hidden states that enter each layer's Q/K/V projections and
MoE router for a *fixed* batch of tokens (the "replay batch"), recorded at every checkpoint.  A
checkpoint alone cannot give them (they depend on every earlier layer), so the training loop records
them (``ckptscan.record.ReplayRecorder``) and ckptscan reads them back here::

    attrs   format = "ckptscan-replay/1", step = int
    input_ids                int   [B, T]   optional: proves every checkpoint saw the same tokens
    layers/<i>/attn_in       float [B, T, d]  normalised hidden state entering layer i's Q/K/V
    layers/<i>/router_in     float [B, T, d]  hidden state entering layer i's MoE router
    layers/<i>/router_logits float [B, T, E]  optional: used as is when present

Any float dtype; bfloat16 is stored as uint16 with the dataset attribute ``dtype = "bfloat16"``.
Files are evidence: opened read-only, read one layer (or a slice of sequences) at a time, and every
breach of the contract is a one-line ``ReplayError`` naming the file and the dataset.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Literal, Self, overload

import numpy as np
import torch

from ckptscan.errors import ReplayError, UsageError

FORMAT = "ckptscan-replay/1"
DEFAULT_NAME = "replay.h5"
ACTIVATIONS = ("attn_in", "router_in", "router_logits")


def find_replay(ckpt_path: Path, step: int, run_dir: Path, pattern: str | None = None) -> Path | None:
    """The replay file of one checkpoint, or None when there is none.

    Without ``pattern``: ``<checkpoint folder>/replay.h5`` (a checkpoint that is a single file has no
    default replay file: a file next to it would be shared by every checkpoint of the folder).
    With ``pattern`` (the ``--replay-pattern`` option): ``pattern.format(step=step, name=<checkpoint name>)``,
    relative to ``run_dir`` unless absolute, e.g. ``replay/step_{step}.h5`` or
    ``replay/{step:08d}.h5``.
    """
    ckpt_path, run_dir = Path(ckpt_path), Path(run_dir)
    if pattern is None:
        candidate = ckpt_path / DEFAULT_NAME if ckpt_path.is_dir() else None
    else:
        try:
            rel = pattern.format(step=step, name=ckpt_path.name)
        except (KeyError, IndexError, ValueError) as err:
            raise UsageError(
                f"--replay-pattern {pattern!r} is not valid: use {{step}} (and optionally {{name}}): {err}"
            ) from err
        candidate = Path(rel) if Path(rel).is_absolute() else run_dir / rel
    return candidate if candidate is not None and candidate.is_file() else None


def _to_float32(arr: np.ndarray, bf16: bool) -> torch.Tensor:
    """A float / bf16-as-uint16 numpy array as a float32 tensor."""
    if bf16:
        return torch.from_numpy(np.ascontiguousarray(arr).view(np.int16)).view(torch.bfloat16).float()
    return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))


class ReplayFile:
    """Read-only access to one replay file (a context manager; also closes on ``close()``).

    ``attn_in(i)``, ``router_in(i)`` and ``router_logits(i)`` return float32 tensors [B, T, .]
    (``seqs`` selects a slice of sequences, for chunked reading of large batches).  ``check`` validates
    shapes against the model before any data is read; ``check_tokens`` compares the token ids with
    another checkpoint's.
    """

    def __init__(self, path: str | Path):
        import h5py  # local: h5py is only needed when replay files are used

        self.path = Path(path)
        try:
            self._f = h5py.File(self.path, "r")
        except (OSError, ValueError) as err:
            raise ReplayError(f"not a readable HDF5 replay file ({_short(err)})", self.path) from err
        try:
            fmt = _attr_text(self._f.attrs.get("format"))
            if not (isinstance(fmt, str) and fmt == FORMAT):  # an array or opaque value is not ours
                raise ReplayError(f"attribute 'format' is {fmt!r}, expected {FORMAT!r}", self.path)
            step = self._f.attrs.get("step")
            if step is None or not np.issubdtype(np.asarray(step).dtype, np.integer) or np.ndim(step) != 0:
                raise ReplayError(f"attribute 'step' must be an integer, got {step!r}", self.path)
            self.step = int(step)
            layers = self._f.get("layers")
            if layers is None or not hasattr(layers, "keys"):
                raise ReplayError("group 'layers' is missing", self.path)
            self._layers: list[int] = []
            for key in layers:
                if not key.isdigit():
                    raise ReplayError(f"'layers/{key}' is not a layer index", self.path)
                self._layers.append(int(key))
            self._layers.sort()
            self._bt: tuple[int, int] | None = None
            ids = self._f.get("input_ids")
            if ids is not None:
                if not hasattr(ids, "shape") or ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
                    raise ReplayError("dataset 'input_ids' must be an integer array [B, T]", self.path)
                self._bt = (int(ids.shape[0]), int(ids.shape[1]))
        except ReplayError:
            self._f.close()
            raise
        except (OSError, ValueError, KeyError, RuntimeError, TypeError) as err:  # h5py on damaged metadata
            self._f.close()
            raise ReplayError(f"damaged HDF5 replay file ({_short(err)})", self.path) from err

    # -- context manager ---------------------------------------------------------------------------
    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._f.close()

    # -- contents ----------------------------------------------------------------------------------
    def layers(self) -> list[int]:
        """Layer indices that have a ``layers/<i>`` group, ascending."""
        return list(self._layers)

    def has(self, layer: int, name: str) -> bool:
        grp = self._f.get(f"layers/{layer}")
        return grp is not None and name in grp

    def input_ids(self) -> np.ndarray | None:
        """The replay tokens [B, T] (int64), or None when the file does not store them."""
        ids = self._f.get("input_ids")
        return None if ids is None else self._read(ids, "input_ids").astype(np.int64)

    def attn_in(self, layer: int, expected_d: int | None = None, seqs: slice | None = None) -> torch.Tensor:
        """Hidden state entering layer ``layer``'s Q/K/V projections, float32 [B, T, d]."""
        return self._activation(layer, "attn_in", expected_d, seqs, required=True)

    def router_in(self, layer: int, expected_d: int | None = None, seqs: slice | None = None) -> torch.Tensor:
        """Hidden state entering layer ``layer``'s router, float32 [B, T, d]."""
        return self._activation(layer, "router_in", expected_d, seqs, required=True)

    def router_logits(
        self, layer: int, expected_e: int | None = None, seqs: slice | None = None
    ) -> torch.Tensor | None:
        """Recorded router logits float32 [B, T, E], or None when the file has none for ``layer``."""
        return self._activation(layer, "router_logits", expected_e, seqs, required=False)

    # -- validation --------------------------------------------------------------------------------
    def check(
        self,
        expected_hidden: int | None,
        n_layers: int | None = None,
        router_layers: Iterable[int] = (),
        n_experts: int | None = None,
    ) -> None:
        """Validate the whole file's shapes against the model without reading any data.

        Every layer 0..n_layers-1 must have ``attn_in``; every layer in ``router_layers`` must have
        ``router_in`` or ``router_logits``; all activations share one [B, T] (that of ``input_ids``
        when present) and the last dimension is ``expected_hidden`` (``n_experts`` for logits).
        """
        if n_layers is not None:
            for i in range(n_layers):
                if not self.has(i, "attn_in"):
                    raise ReplayError(
                        f"dataset 'layers/{i}/attn_in' is missing (model has {n_layers} layers)", self.path
                    )
        for i in router_layers:
            if not (self.has(i, "router_in") or self.has(i, "router_logits")):
                raise ReplayError(
                    f"dataset 'layers/{i}/router_in' is missing (layer {i} is an MoE layer)", self.path
                )
        for i in self._layers:
            for name in ACTIVATIONS:
                if self.has(i, name):
                    expected = n_experts if name == "router_logits" else expected_hidden
                    self._dataset(i, name, expected)

    def check_tokens(self, reference_ids: np.ndarray | torch.Tensor | None) -> bool:
        """Raise ``ReplayError`` if this file's tokens differ from ``reference_ids``.

        Returns True when the comparison was made, False when either side has no ``input_ids`` (then
        nothing proves the batches are the same; the caller may warn).
        """
        mine = self.input_ids()
        if mine is None or reference_ids is None:
            return False
        ref = np.asarray(reference_ids.cpu() if isinstance(reference_ids, torch.Tensor) else reference_ids)
        if ref.shape != mine.shape:
            raise ReplayError(
                f"dataset 'input_ids' has shape {list(mine.shape)}, the reference replay batch "
                f"has {list(ref.shape)}: not the same tokens",
                self.path,
            )
        diff = np.argwhere(mine != ref.astype(np.int64))
        if diff.size:
            b, t = diff[0]
            raise ReplayError(
                f"dataset 'input_ids' differs from the reference replay batch ({len(diff)} tokens, "
                f"first at sequence {b}, position {t}): every checkpoint must replay the same tokens",
                self.path,
            )
        return True

    # -- internals ---------------------------------------------------------------------------------
    def _dataset(self, layer: int, name: str, expected_last: int | None):
        """The h5py dataset ``layers/<layer>/<name>`` after checking kind, dtype and shape."""
        where = f"layers/{layer}/{name}"
        grp = self._f.get(f"layers/{layer}")
        if grp is None:
            have = ", ".join(map(str, self._layers)) or "none"
            raise ReplayError(f"group 'layers/{layer}' is missing (layers present: {have})", self.path)
        ds = grp.get(name)
        if ds is None:
            return None
        if not hasattr(ds, "shape"):
            raise ReplayError(f"'{where}' is not a dataset", self.path)
        tag = _attr_text(ds.attrs.get("dtype"))
        if isinstance(tag, str) and tag == "bfloat16":
            if ds.dtype != np.uint16:
                raise ReplayError(
                    f"dataset '{where}' is tagged bfloat16 but stored as {ds.dtype}, not uint16", self.path
                )
        elif ds.dtype.kind != "f":
            raise ReplayError(
                f"dataset '{where}' has dtype {ds.dtype}; expected a float dtype "
                f"(or uint16 with attribute dtype='bfloat16')",
                self.path,
            )
        if ds.ndim != 3:
            raise ReplayError(
                f"dataset '{where}' has shape {list(ds.shape)}; expected [B, T, "
                f"{'E' if name == 'router_logits' else 'd'}]",
                self.path,
            )
        b, t, last = (int(s) for s in ds.shape)
        if expected_last is not None and last != expected_last:
            what = "number of experts" if name == "router_logits" else "hidden size"
            raise ReplayError(
                f"dataset '{where}' has shape {list(ds.shape)}: last dimension {last} is not the "
                f"model's {what} {expected_last}",
                self.path,
            )
        if self._bt is None:
            self._bt = (b, t)
        elif (b, t) != self._bt:
            raise ReplayError(
                f"dataset '{where}' has shape {list(ds.shape)}: [B, T] differs from the file's "
                f"{list(self._bt)} (input_ids or another layer)",
                self.path,
            )
        return ds

    @overload
    def _activation(
        self, layer: int, name: str, expected_last: int | None, seqs: slice | None, required: Literal[True]
    ) -> torch.Tensor: ...
    @overload
    def _activation(
        self, layer: int, name: str, expected_last: int | None, seqs: slice | None, required: bool
    ) -> torch.Tensor | None: ...
    def _activation(
        self, layer: int, name: str, expected_last: int | None, seqs: slice | None, required: bool
    ) -> torch.Tensor | None:
        ds = self._dataset(layer, name, expected_last)
        if ds is None:
            if required:
                raise ReplayError(f"dataset 'layers/{layer}/{name}' is missing", self.path)
            return None
        bf16 = ds.dtype == np.uint16
        arr = self._read(ds, f"layers/{layer}/{name}", seqs)
        return _to_float32(arr, bf16)

    def _read(self, ds, where: str, seqs: slice | None = None) -> np.ndarray:
        try:
            return ds[seqs] if seqs is not None else ds[()]
        except (OSError, ValueError, KeyError, RuntimeError) as err:
            raise ReplayError(f"cannot read dataset '{where}' ({_short(err)})", self.path) from err


def _attr_text(value):
    """An HDF5 attribute as text when it is a string (bytes, or opaque bytes written as np.void);
    any other value is returned as is, for the caller's ``isinstance(.., str)`` check."""
    if isinstance(value, np.void):
        value = value.tobytes()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _short(err: BaseException) -> str:
    """The first line of an h5py error message (they can be long and multi-line)."""
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
