"""On-disk output of a drill: HF checkpoint folders, replay activation files, JSON side files.

Every file is written to a temporary name in the same folder and moved into place with
``os.replace``, so a reader never sees half a file (a drill may be analysed while it runs).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import h5py
import numpy as np
import torch
from safetensors.torch import save_file

FOLDER_STYLES = {
    "checkpoint": "checkpoint-{step}",
    "step-": "step-{step}",
    "step_": "step_{step}",
    "iter": "iter_{step:07d}",
    "global_step": "global_step{step}",
}
REPLAY_FORMAT = "ckptscan-replay/1"


def folder_name(style: str, step: int) -> str:
    return FOLDER_STYLES[style].format(step=step)


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def write_json(path: Path, obj) -> None:
    tmp = _tmp(path)
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)


def _save_safetensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    tmp = _tmp(path)
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, path)


def save_weights(folder: Path, tensors: dict[str, torch.Tensor], *, fmt: str = "safetensors",
                 dtype: str = "float32", shards: int = 1) -> list[str]:
    """Write ``tensors`` into ``folder``; returns the file names written.

    ``fmt="torch"`` writes ``pytorch_model.bin`` (a plain state dict, loadable with weights_only).
    ``shards > 1`` writes ``model-0000i-of-0000N.safetensors`` plus ``model.safetensors.index.json``.
    """
    tdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    tensors = {k: v.to(tdtype).contiguous() for k, v in tensors.items()}
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "torch":
        path = folder / "pytorch_model.bin"
        tmp = _tmp(path)
        torch.save(tensors, tmp)
        os.replace(tmp, path)
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
    write_json(folder / "model.safetensors.index.json",
               {"metadata": {"total_size": total}, "weight_map": weight_map})
    return files + ["model.safetensors.index.json"]


def write_replay(path: Path, step: int, input_ids: torch.Tensor, acts: dict[str, torch.Tensor]) -> None:
    """Write the replay file (contract ``ckptscan-replay/1``, see docs/drills.md), atomically.

    ``acts`` maps ``"layers/<i>/attn_in"`` etc. to float tensors; values are stored as float32.
    """
    tmp = _tmp(path)
    with h5py.File(tmp, "w") as f:
        f.attrs["format"] = REPLAY_FORMAT
        f.attrs["step"] = int(step)
        f.create_dataset("input_ids", data=input_ids.numpy().astype(np.int32))
        for name, t in acts.items():
            f.create_dataset(name, data=t.detach().float().numpy())
    os.replace(tmp, path)
