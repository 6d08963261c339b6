"""Byte-level training text found on the machine: the Python standard library's own ``.py`` sources.

Why: drills must run offline and reproducibly, with real (not random) text so that the loss curve has
the usual shape.  The file list is sorted and split by a hash of each file's relative path, so the
same interpreter gives the same corpus everywhere; ``fingerprint`` (sha256 of the bytes) goes into
``truth.json`` so that a run on a different Python can be told apart.

Sources:
* ``"main"``    stdlib modules outside test folders (training data);
* ``"switch"``  the stdlib test suite (``test/``, ``tests/``): still Python, but a different
  distribution -- the benign ``data-switch`` event moves training onto it;
* ``"heldout"`` one file in twenty of the main set (by path hash), never trained on: the replay batch.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

MAX_BYTES = 6_000_000  # per source; plenty for a few thousand steps of 16 x 64 bytes


def _stdlib_files() -> tuple[Path, list[Path]]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).parts
        if "site-packages" in rel or "dist-packages" in rel:
            continue
        files.append(p)
    return root, files


def _is_test(rel: str) -> bool:
    parts = rel.split("/")
    return any(x in ("test", "tests") for x in parts[:-1])


def _heldout(rel: str) -> bool:
    return int(hashlib.sha256(rel.encode()).hexdigest()[:8], 16) % 20 == 0


@dataclass
class Corpus:
    """Three byte tensors (uint8) and a fingerprint of all three."""

    main: torch.Tensor
    switch: torch.Tensor
    heldout: torch.Tensor
    fingerprint: str
    n_files: int


def load_corpus(max_bytes: int = MAX_BYTES) -> Corpus:
    root, files = _stdlib_files()
    buckets: dict[str, list[bytes]] = {"main": [], "switch": [], "heldout": []}
    sizes = dict.fromkeys(buckets, 0)
    for p in files:
        rel = p.relative_to(root).as_posix()
        key = "switch" if _is_test(rel) else ("heldout" if _heldout(rel) else "main")
        if sizes[key] >= max_bytes:
            continue
        try:
            b = p.read_bytes()
        except OSError:
            continue
        if not b:
            continue
        buckets[key].append(b)
        sizes[key] += len(b)
    h = hashlib.sha256()
    out = {}
    for key, chunks in buckets.items():
        blob = b"\n".join(chunks)[:max_bytes]
        if len(blob) < 10_000:
            raise RuntimeError(f"stdlib text for source {key!r} too small ({len(blob)} bytes) under {root}")
        h.update(blob)
        out[key] = torch.frombuffer(bytearray(blob), dtype=torch.uint8).clone()
    return Corpus(out["main"], out["switch"], out["heldout"], h.hexdigest()[:16], len(files))


def sample_batch(data: torch.Tensor, batch: int, seq: int, gen: torch.Generator) -> torch.Tensor:
    """``batch`` random windows of ``seq + 1`` bytes (inputs and shifted targets), int64."""
    starts = torch.randint(0, data.numel() - seq - 1, (batch,), generator=gen)
    idx = starts[:, None] + torch.arange(seq + 1)[None, :]
    return data[idx].long()


def replay_batch(corpus: Corpus, batch: int = 2, seq: int = 64) -> torch.Tensor:
    """The fixed replay batch: evenly spaced windows of held-out text (no randomness at all)."""
    n = corpus.heldout.numel()
    starts = [(i + 1) * n // (batch + 1) for i in range(batch)]
    return torch.stack([corpus.heldout[s : s + seq].long() for s in starts])
