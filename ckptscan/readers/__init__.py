"""Checkpoint readers: find the model weights in a checkpoint folder or file and open them.

Each format is one unit in its own module (``safetensors_``, ``dcp``, ``torchfile``, ``deepspeed``),
registered with ``registry.register_format``; the functions here loop over ``registry.FORMATS``.

``open_checkpoint(path)`` returns a ``TensorSource`` (see ``base.py``); ``detect_format(path)`` and
``is_complete(path)`` are the cheap checks run discovery uses to decide whether a folder is a
checkpoint and whether it was fully written.

Which files are model weights (first rule that matches wins)
-------------------------------------------------------------
A path to a file is used as given (``*.safetensors``, ``*.safetensors.index.json``, ``*.index.json`` of
torch shards, ``.metadata`` of a DCP folder, ``*.bin``/``*.pt``/``*.pth``/``*.ckpt``).  In a folder:

The rules of the built-in formats, in their precedence order:

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

from pathlib import Path

from ckptscan.errors import CkptscanError, FormatError, unexpected

# each reader module registers its format when imported: the import order does not matter
# (``Format.precedence`` does)
from ckptscan.readers import dcp, deepspeed, remote, safetensors_, torchfile  # noqa: F401
from ckptscan.readers._common import os_error, safe_member
from ckptscan.readers.base import TensorInfo, TensorSource
from ckptscan.readers.registry import FORMATS, Listing, Plan, is_model_file, looked_for, weight_files

__all__ = ["TensorInfo", "TensorSource", "detect_format", "is_complete", "open_checkpoint"]

WEIGHT_SUBDIRS = ("model_and_optim", "weights")  # OLMo-core, NeMo 2
DEEPSPEED_TAG_FILE = "latest"  # names the global_stepN folder DeepSpeed saved last


def _plan_file(path: Path) -> Plan | str:
    for fmt in FORMATS:
        plan = fmt.plan_file(path)
        if plan is not None:
            return plan
    return f"not a recognized checkpoint file (looked for {looked_for()})"


def _plan_folder(folder: Path) -> Plan | str:
    try:
        names = sorted(p.name for p in folder.iterdir() if p.is_file())
    except OSError as err:
        raise os_error(folder, err) from err
    listing = Listing(folder, names, [n for n in names if is_model_file(n)])
    for last_resort in (False, True):
        if last_resort and listing.several_indexes:
            several = ", ".join(listing.several_indexes)
            return f"ambiguous: several index files ({several}); pass the one you mean"
        for fmt in FORMATS:
            if fmt.last_resort == last_resort:
                plan = fmt.plan_folder(listing)
                if plan is not None:
                    return plan
    for sub in _weight_subdirs(folder, names):
        sub_plan = _plan_folder(sub)
        if isinstance(sub_plan, Plan):
            return sub_plan
    return f"no checkpoint files found (looked for {looked_for()})"


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


def _plan(path: Path) -> Plan | str:
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
    return plan.format if isinstance(plan, Plan) else None


def open_checkpoint(path: Path, trust_pickle: bool = False) -> TensorSource:
    """Open the model weights of a checkpoint folder or file (rules in the module docstring).

    A checkpoint inside the mirror of a run at a URL (``remote.mount``) is opened at its URL."""
    path = Path(path)
    plan = _plan(path)
    if isinstance(plan, str):
        raise FormatError(plan, path)
    m = remote.mounted(path)
    if m is not None:
        src: TensorSource = remote.open_mounted(m, plan.format, path, _plan_files(plan))  # type: ignore[assignment]  # path: its redacted URL
        return src
    return plan.reader.open(plan, trust_pickle)


def _plan_files(plan: Plan) -> list[Path]:
    return [plan.index] if plan.index is not None else plan.files


def is_complete(path: Path) -> tuple[bool, str]:
    """Was this checkpoint fully written?  ``(True, "")`` or ``(False, one-line reason)``.

    Cheap: reads headers/metadata and file sizes, never tensor data (each format's
    ``check_complete``).  Catches missing shards, empty or truncated safetensors files, torch zip
    files without their central directory (cut short), and DCP folders without ``.metadata`` or with
    data files shorter than the metadata says.
    """
    try:
        plan = _plan(path)
        if isinstance(plan, str):
            return False, plan
        m = remote.mounted(path)
        if m is not None:  # the headers at the URL (their sizes), and an index's shards listed
            if plan.index is not None:
                weight_files(plan)
            remote.open_mounted(m, plan.format, path, _plan_files(plan)).close()
            return True, ""
        plan.reader.check_complete(plan)
    except CkptscanError as err:
        return False, str(err)
    except Exception as err:  # noqa: BLE001 -- discovery's containment boundary: the entry is skipped
        return False, unexpected(err)
    return True, ""
