"""The one small interface every checkpoint format implements.

A ``TensorSource`` lists tensor names, shapes and dtypes from headers/metadata alone, and reads one
tensor at a time (memory-mapped where the format allows).  A checkpoint is never loaded whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Self, runtime_checkable

import torch


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    dtype: str  # torch dtype name without the "torch." prefix: "bfloat16", "float32", ...
    file: str  # the file (relative to the checkpoint folder) that holds it


@runtime_checkable
class TensorSource(Protocol):
    path: Path  # the checkpoint folder or file
    format: str  # "safetensors" | "safetensors-sharded" | "torch" | "dcp"

    def infos(self) -> dict[str, TensorInfo]:
        """All tensors, from headers only (no tensor data read)."""
        ...

    def read(self, name: str) -> torch.Tensor:
        """One tensor, on the CPU, in its stored dtype.  Raises FormatError naming the file."""
        ...

    def close(self) -> None: ...

    # every source is a context manager (``with open_checkpoint(path) as src``) that closes itself
    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...
