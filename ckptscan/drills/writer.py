"""On-disk output of a drill: HF checkpoint folders and JSON side files (replay files are written
by ``ckptscan.record``, the recorder real training loops use).

Every file is written atomically (``ckptscan.store.timeline.atomic_write``), so a reader never sees half
a file (a drill may be analysed while it runs).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from ckptscan.store.timeline import atomic_write

FOLDER_STYLES = {
    "checkpoint": "checkpoint-{step}",
    "step-": "step-{step}",
    "step_": "step_{step}",
    "iter": "iter_{step:07d}",
    "global_step": "global_step{step}",
}


def folder_name(style: str, step: int) -> str:
    return FOLDER_STYLES[style].format(step=step)


def write_json(path: Path, obj) -> None:
    atomic_write(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def _save_safetensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    atomic_write(path, writer=lambda tmp: save_file(tensors, str(tmp), metadata={"format": "pt"}))


def save_weights(
    folder: Path,
    tensors: dict[str, torch.Tensor],
    *,
    fmt: str = "safetensors",
    dtype: str = "float32",
    shards: int = 1,
) -> list[str]:
    """Write ``tensors`` into ``folder``; returns the file names written.

    ``fmt="torch"`` writes ``pytorch_model.bin`` (a plain state dict, loadable with weights_only).
    ``shards > 1`` writes ``model-0000i-of-0000N.safetensors`` plus ``model.safetensors.index.json``.
    """
    tdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    tensors = {k: v.to(tdtype).contiguous() for k, v in tensors.items()}
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "torch":
        path = folder / "pytorch_model.bin"
        atomic_write(path, writer=lambda tmp: torch.save(tensors, tmp))
        return [path.name]
    if shards <= 1:
        _save_safetensors(tensors, folder / "model.safetensors")
        return ["model.safetensors"]
    names = list(tensors)
    per = -(-len(names) // shards)
    weight_map, files, total = {}, [], 0
    for i in range(shards):
        part = names[i * per : (i + 1) * per]
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        _save_safetensors({k: tensors[k] for k in part}, folder / fname)
        files.append(fname)
        for k in part:
            weight_map[k] = fname
            total += tensors[k].numel() * tensors[k].element_size()
    write_json(
        folder / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map}
    )
    return files + ["model.safetensors.index.json"]
