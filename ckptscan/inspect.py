"""``ckptscan inspect``: what ckptscan finds in one checkpoint (format, layout, tensors, heads)."""

from __future__ import annotations

from pathlib import Path

from ckptscan.layouts import resolve_layout
from ckptscan.pipeline import load_config
from ckptscan.readers import open_checkpoint


def describe_checkpoint(path: Path, layout_file: Path | None = None, trust_pickle: bool = False,
                        all_tensors: bool = False) -> dict:
    path = Path(path)
    config, config_path = load_config(path, path.parent if path.is_dir() else path.parent.parent)
    with open_checkpoint(path, trust_pickle=trust_pickle) as src:
        infos = src.infos()
        layout = resolve_layout(infos, config, layout_file)
        out = {
            "path": str(path),
            "format": src.format,
            "config": str(config_path) if config_path else None,
            "n_tensors": len(infos),
            "dtypes": sorted({i.dtype for i in infos.values()}),
            "files": sorted({i.file for i in infos.values()}),
            "layout": layout.describe(),
        }
        if all_tensors:
            out["tensors"] = [{"name": i.name, "shape": list(i.shape), "dtype": i.dtype, "file": i.file}
                              for i in sorted(infos.values(), key=lambda i: i.name)]
    return out
