"""``ckptscan inspect``: what ckptscan finds in one checkpoint (format, layout, tensors, heads)."""

from __future__ import annotations

from pathlib import Path

from ckptscan.layouts import resolve_layout
from ckptscan.pipeline.analyzer import Options, checkpoint_config
from ckptscan.readers import open_checkpoint


def describe_checkpoint(
    path: Path,
    layout_file: Path | None = None,
    trust_pickle: bool = False,
    all_tensors: bool = False,
    config_file: Path | None = None,
    model_overrides: dict | None = None,
) -> dict:
    path = Path(path)
    run_dir = path.parent if path.is_dir() else path.parent.parent
    opt = Options(config_file=config_file, model_overrides=model_overrides or {})
    with open_checkpoint(path, trust_pickle=trust_pickle) as src:
        config, config_path = checkpoint_config(path, src, run_dir, opt)
        infos = src.infos()
        layout = resolve_layout(infos, config, layout_file, opt.model_overrides)
        out: dict[str, object] = {
            "path": str(path),
            "format": src.format,
            "config": config_path,
            "n_tensors": len(infos),
            "dtypes": sorted({i.dtype for i in infos.values()}),
            "files": sorted({i.file for i in infos.values()}),
            "layout": layout.describe(),
        }
        if all_tensors:
            out["tensors"] = [
                {"name": i.name, "shape": list(i.shape), "dtype": i.dtype, "file": i.file}
                for i in sorted(infos.values(), key=lambda i: i.name)
            ]
    return out
