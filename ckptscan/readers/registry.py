"""The checkpoint formats: each one unit, registered in one place (its reader module).

A ``Format`` says how to recognise its checkpoints (a file given as it is: ``plan_file``; a folder's
file names: ``plan_folder``), how to open one as a ``TensorSource`` (``open``), how to check
cheaply that it was fully written (``check_complete``), which file names discovery may take for a
whole checkpoint file (``file_suffixes``), and what a writer still busy with it leaves in a folder
(``unfinished``, for ``ckptscan watch``).  ``readers/__init__.py`` (``open_checkpoint``,
``detect_format``, ``is_complete``), ``discover`` and ``watch`` loop over ``FORMATS``, in
``precedence`` order: the first format that recognises a folder wins.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ckptscan.readers._common import check_shards, load_weight_map

if TYPE_CHECKING:
    from ckptscan.readers.base import TensorSource

# training-state files that sit next to the weights and are never model-weight candidates
NON_MODEL = (
    "optimizer*", "optim*", "*optim_states*", "zero_pp_rank_*", "scheduler*", "lr_scheduler*",
    "rng_state*", "random_states*", "scaler*", "training_args*", "trainer_state*",
)  # fmt: skip


@dataclass
class Plan:
    """What to open: the format, its name for this checkpoint, the checkpoint path, and the index
    file or the weight files."""

    reader: Format
    format: str  # the name reported: "safetensors", "safetensors-sharded", "torch", "dcp", ...
    path: Path
    files: list[Path] = field(default_factory=list)
    index: Path | None = None


@dataclass
class Listing:
    """One folder's file names, as every format's folder rule sees them."""

    folder: Path
    names: list[str]  # every regular file, sorted
    models: list[str]  # the names that are not training state (``NON_MODEL``)
    # index files of one format too many to choose from; the folder is ambiguous unless a format
    # with a lower precedence (or no format) claims it first
    several_indexes: list[str] = field(default_factory=list)

    def only(self, pattern: str, names: list[str] | None = None) -> list[str]:
        return [n for n in (self.names if names is None else names) if fnmatch.fnmatch(n, pattern)]


def is_model_file(name: str) -> bool:
    return not any(fnmatch.fnmatch(name.lower(), pat) for pat in NON_MODEL)


def _never_file(path: Path) -> Plan | None:
    return None


def _finished(names: set[str]) -> str:
    return ""


@dataclass(frozen=True)
class Format:
    """One checkpoint format (see the module docstring)."""

    name: str
    precedence: int  # lower first, among the formats that recognise the same folder or file
    looked_for: str  # what its files look like, for the "no checkpoint files found" message
    plan_folder: Callable[[Listing], Plan | str | None]  # a str: the folder is ambiguous (final)
    open: Callable[[Plan, bool], TensorSource]  # (plan, trust_pickle)
    check_complete: Callable[[Plan], None]  # raises a CkptscanError naming what is missing/truncated
    plan_file: Callable[[Path], Plan | None] = _never_file
    file_suffixes: tuple[str, ...] = ()  # a file so named may be a whole checkpoint (discovery)
    unfinished: Callable[[set[str]], str] = _finished  # a folder's names -> why not done yet
    # only when no other format's files are in the folder and no index is ambiguous (ZeRO-3's rank
    # files are training state to every other format)
    last_resort: bool = False


FORMATS: list[Format] = []


def register_format(fmt: Format) -> Format:
    """Add a format (once per name); ``FORMATS`` stays in precedence order."""
    if any(f.name == fmt.name for f in FORMATS):
        raise ValueError(f"checkpoint format {fmt.name!r} is registered twice")
    FORMATS.append(fmt)
    FORMATS.sort(key=lambda f: (f.last_resort, f.precedence))
    return fmt


def unregister_format(name: str) -> None:
    """Remove a format (a test that registered its own)."""
    FORMATS[:] = [f for f in FORMATS if f.name != name]


def weight_files(plan: Plan) -> list[Path]:
    """The plan's weight files; with an index, every shard it names (each must be there)."""
    if plan.index is None:
        return plan.files
    return list(check_shards(plan.path, load_weight_map(plan.index), plan.index).values())


def looked_for() -> str:
    return ", ".join(f.looked_for for f in FORMATS)


def file_suffixes() -> tuple[str, ...]:
    """Every file-name ending that a registered format reads as a whole checkpoint file."""
    return tuple(dict.fromkeys(s for f in FORMATS for s in f.file_suffixes))
