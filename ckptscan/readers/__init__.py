"""Checkpoint readers: find the model weights in a checkpoint folder or file and open them.

``open_checkpoint(path)`` returns a ``TensorSource`` (see ``base.py``); ``detect_format(path)`` and
``is_complete(path)`` are the cheap checks run discovery uses to decide whether a folder is a
checkpoint and whether it was fully written.

Which files are model weights (first rule that matches wins)
-------------------------------------------------------------
A path to a file is used as given (``*.safetensors``, ``*.safetensors.index.json``, ``*.index.json`` of
torch shards, ``.metadata`` of a DCP folder, ``*.bin``/``*.pt``/``*.pth``/``*.ckpt``).  In a folder:

1. safetensors index: ``model.safetensors.index.json``, else the only ``*.safetensors.index.json``;
2. safetensors files: ``model.safetensors`` if present, else every ``*.safetensors`` (read as one set;
   a tensor name in two files is an error);
3. DCP: a ``.metadata`` file or ``*.distcp`` files;
4. torch index: ``pytorch_model.bin.index.json``, else the only ``*.bin.index.json``;
5. torch files: ``pytorch_model.bin``; else every ``pytorch_model-*.bin``; else the only
   ``mp_rank_*_model_states.pt`` (DeepSpeed ZeRO-0/1/2); else the only ``consolidated*.pth``; else the
   only remaining ``*.bin``/``*.pt``/``*.pth``/``*.ckpt``.  Several remaining candidates are
   ambiguous: open the file you mean directly;
6. DeepSpeed ZeRO-3: ``zero_pp_rank_*_model_states.pt`` with their ``*_optim_states.pt``
   (``deepspeed.py``);
7. none of these: the weights of a known subfolder, by the rules above: ``model_and_optim/``
   (OLMo-core), ``weights/`` (NeMo 2), or the DeepSpeed tag named by a ``latest`` file
   (``global_stepN/`` inside a Hugging Face Trainer checkpoint).

Training-state files that sit next to the weights are never candidates: ``optimizer*``, ``optim*``,
``*optim_states*``, ``zero_pp_rank_*``, ``scheduler*``, ``lr_scheduler*``, ``rng_state*``,
``random_states*``, ``scaler*``, ``training_args*``, ``trainer_state*`` (Hugging Face Trainer,
DeepSpeed and Accelerate folders).
"""

from __future__ import annotations

import fnmatch
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ckptscan.errors import CkptscanError, FormatError, unexpected
from ckptscan.readers._common import check_shards, file_size, load_weight_map, os_error, safe_member
from ckptscan.readers.base import TensorInfo, TensorSource
from ckptscan.readers.dcp import METADATA_FILE, DcpSource, load_metadata
from ckptscan.readers.deepspeed import MODEL_STATES, OPTIM_STATES, ZeroSource, rank_files
from ckptscan.readers.safetensors_ import SafetensorsSource, parse_header
from ckptscan.readers.torchfile import TorchSource, is_zip

__all__ = ["TensorInfo", "TensorSource", "detect_format", "is_complete", "open_checkpoint"]

NON_MODEL = (
    "optimizer*", "optim*", "*optim_states*", "zero_pp_rank_*", "scheduler*", "lr_scheduler*",
    "rng_state*", "random_states*", "scaler*", "training_args*", "trainer_state*",
)  # fmt: skip
TORCH_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
LOOKED_FOR = (
    "*.safetensors[.index.json], .metadata/*.distcp (DCP), pytorch_model*.bin[.index.json], *.pt, *.pth, "
    "*.ckpt, DeepSpeed ZeRO-3 rank files"
)
WEIGHT_SUBDIRS = ("model_and_optim", "weights")  # OLMo-core, NeMo 2
DEEPSPEED_TAG_FILE = "latest"  # names the global_stepN folder DeepSpeed saved last


@dataclass
class _Plan:
    """What to open: a format, the index file or the weight files, and the checkpoint path."""

    kind: str  # "st-index" | "st-files" | "dcp" | "torch-index" | "torch-files" | "zero3"
    path: Path
    files: list[Path] = field(default_factory=list)
    index: Path | None = None

    @property
    def format(self) -> str:
        if self.kind == "st-files":
            return "safetensors" if len(self.files) == 1 else "safetensors-sharded"
        return {"st-index": "safetensors-sharded", "dcp": "dcp", "zero3": "deepspeed-zero3"}.get(
            self.kind, "torch"
        )


def _is_model_file(name: str) -> bool:
    return not any(fnmatch.fnmatch(name.lower(), pat) for pat in NON_MODEL)


def _plan_file(path: Path) -> _Plan | str:
    name = path.name
    if name.endswith(".safetensors.index.json"):
        return _Plan("st-index", path.parent, index=path)
    if name.endswith(".index.json"):
        return _Plan("torch-index", path.parent, index=path)
    if name == METADATA_FILE or name.endswith(".distcp"):
        return _Plan("dcp", path.parent)
    if name.endswith(".safetensors"):
        return _Plan("st-files", path, files=[path])
    if name.endswith(TORCH_SUFFIXES):
        return _Plan("torch-files", path, files=[path])
    return f"not a recognized checkpoint file (looked for {LOOKED_FOR})"


def _only(names: list[str], pattern: str) -> list[str]:
    return [n for n in names if fnmatch.fnmatch(n, pattern)]


def _plan_folder(folder: Path) -> _Plan | str:
    try:
        names = sorted(p.name for p in folder.iterdir() if p.is_file())
    except OSError as err:
        raise os_error(folder, err) from err
    models = [n for n in names if _is_model_file(n)]

    st_index = (
        ["model.safetensors.index.json"]
        if "model.safetensors.index.json" in names
        else _only(models, "*.safetensors.index.json")
    )
    if len(st_index) == 1:
        return _Plan("st-index", folder, index=folder / st_index[0])
    st = ["model.safetensors"] if "model.safetensors" in names else _only(models, "*.safetensors")
    if st:
        return _Plan("st-files", folder, files=[folder / n for n in st])
    if METADATA_FILE in names or _only(names, "*.distcp"):
        return _Plan("dcp", folder)
    pt_index = (
        ["pytorch_model.bin.index.json"]
        if "pytorch_model.bin.index.json" in names
        else _only(models, "*.bin.index.json")
    )
    if len(pt_index) == 1:
        return _Plan("torch-index", folder, index=folder / pt_index[0])
    candidates = [n for n in models if n.endswith(TORCH_SUFFIXES)]
    if "pytorch_model.bin" in names:
        return _Plan("torch-files", folder, files=[folder / "pytorch_model.bin"])
    shards = _only(candidates, "pytorch_model-*.bin")  # shards without their index: read as one set
    if shards:
        return _Plan("torch-files", folder, files=[folder / n for n in shards])
    for group in (
        _only(candidates, "mp_rank_*_model_states.pt"),
        _only(candidates, "consolidated*.pth"),
        candidates,
    ):
        if len(group) == 1:
            return _Plan("torch-files", folder, files=[folder / group[0]])
        if len(group) > 1:
            return f"ambiguous: several candidate weight files ({', '.join(group)}); pass the file you mean"
    if len(st_index) > 1 or len(pt_index) > 1:
        return f"ambiguous: several index files ({', '.join(st_index + pt_index)}); pass the one you mean"
    if _only(names, MODEL_STATES):
        return _Plan("zero3", folder)
    for sub in _weight_subdirs(folder, names):
        plan = _plan_folder(sub)
        if isinstance(plan, _Plan):
            return plan
    return f"no checkpoint files found (looked for {LOOKED_FOR})"


def _weight_subdirs(folder: Path, names: list[str]) -> list[Path]:
    subs = [folder / s for s in WEIGHT_SUBDIRS]
    if DEEPSPEED_TAG_FILE in names:
        try:
            tag = (folder / DEEPSPEED_TAG_FILE).read_text(errors="replace").strip()
        except OSError:
            tag = ""
        if tag:
            subs.append(safe_member(folder, tag, folder / DEEPSPEED_TAG_FILE))
    return [s for s in subs if s.is_dir()]


def _plan(path: Path) -> _Plan | str:
    path = Path(path)
    if path.is_dir():
        return _plan_folder(path)
    if path.is_file():
        return _plan_file(path)
    try:
        path.stat()
    except OSError as err:
        raise os_error(path, err) from err
    return "not a regular file or folder"


def detect_format(path: Path) -> str | None:
    """The checkpoint format of a folder/file from file names alone, or None if it is not one.

    Cheap (one directory listing, no file opened); a folder whose weights are ambiguous is None.
    """
    try:
        plan = _plan(path)
    except CkptscanError:
        return None
    return plan.format if isinstance(plan, _Plan) else None


def open_checkpoint(path: Path, trust_pickle: bool = False) -> TensorSource:
    """Open the model weights of a checkpoint folder or file (rules in the module docstring)."""
    path = Path(path)
    plan = _plan(path)
    if isinstance(plan, str):
        raise FormatError(plan, path)
    if plan.kind == "st-index":
        return SafetensorsSource.from_index(plan.index)
    if plan.kind == "st-files":
        if plan.path.is_file():
            return SafetensorsSource.from_file(plan.path)
        return SafetensorsSource.from_files(plan.path, plan.files)
    if plan.kind == "dcp":
        if not (plan.path / METADATA_FILE).is_file():
            raise FormatError(
                f"checkpoint incomplete: DCP {METADATA_FILE} missing (save interrupted?)", plan.path
            )
        return DcpSource(plan.path)
    if plan.kind == "torch-index":
        return TorchSource.from_index(plan.index, trust_pickle=trust_pickle)
    if plan.kind == "zero3":
        return ZeroSource(plan.path)
    if plan.path.is_file():
        return TorchSource.from_file(plan.path, trust_pickle=trust_pickle)
    return TorchSource.from_files(plan.path, plan.files, trust_pickle=trust_pickle)


def is_complete(path: Path) -> tuple[bool, str]:
    """Was this checkpoint fully written?  ``(True, "")`` or ``(False, one-line reason)``.

    Cheap: reads headers/metadata and file sizes, never tensor data.  Catches missing shards, empty or
    truncated safetensors files, torch zip files without their central directory (cut short), and DCP
    folders without ``.metadata`` or with data files shorter than the metadata says.
    """
    try:
        plan = _plan(path)
        if isinstance(plan, str):
            return False, plan
        _check_complete(plan)
    except CkptscanError as err:
        return False, str(err)
    except Exception as err:  # noqa: BLE001 -- discovery's containment boundary: the entry is skipped
        return False, unexpected(err)
    return True, ""


def _check_complete(plan: _Plan) -> None:
    files = plan.files
    if plan.index is not None:
        files = list(check_shards(plan.path, load_weight_map(plan.index), plan.index).values())
    if plan.kind.startswith("st-"):
        for f in files:
            parse_header(f)
    elif plan.kind == "zero3":
        models, optims = rank_files(plan.path, MODEL_STATES), rank_files(plan.path, OPTIM_STATES)
        if len(optims) != len(models):
            raise FormatError(
                f"checkpoint incomplete: {len(models)} ZeRO model-state files but "
                f"{len(optims)} optimizer-state files",
                plan.path,
            )
        for f in models + optims:
            if file_size(f) == 0:
                raise FormatError("file is empty (0 bytes): truncated or interrupted save", f)
    elif plan.kind.startswith("torch-"):
        for f in files:
            if file_size(f) == 0:
                raise FormatError("file is empty (0 bytes): truncated or interrupted save", f)
            if is_zip(f) and not zipfile.is_zipfile(f):
                raise FormatError("torch zip file has no central directory: truncated", f)
    else:
        meta_path = plan.path / METADATA_FILE
        if not meta_path.is_file():
            raise FormatError(
                f"checkpoint incomplete: DCP {METADATA_FILE} missing (save interrupted?)", plan.path
            )
        ends: dict[str, int] = {}
        for info in load_metadata(plan.path).storage_data.values():
            ends[info.relative_path] = max(ends.get(info.relative_path, 0), info.offset + info.length)
        for rel, end in ends.items():
            p = safe_member(plan.path, rel, meta_path)
            if not p.is_file():
                raise FormatError(f"checkpoint incomplete: {rel} missing", meta_path)
            if file_size(p) < end:
                raise FormatError(f"truncated: {file_size(p)} bytes, metadata needs {end}", p)
