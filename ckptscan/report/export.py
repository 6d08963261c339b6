"""``ckptscan export RESULT``: a stored result's monitors for the tools people already use.

* ``csv`` and ``parquet``: one long table, a row per checkpoint, monitor, layer and head:
  ``step, monitor, layer, head, value`` (``head`` empty for per-layer monitors, ``value`` empty
  where the monitor is undefined, e.g. an increment at the first checkpoint).  Parquet needs
  ``pyarrow`` (``pip install 'ckptscan[parquet]'``).
* ``tensorboard``: event files written by PyTorch's ``SummaryWriter`` (which needs the
  ``tensorboard`` package, ``pip install 'ckptscan[tensorboard]'``), at the training steps, so that
  TensorBoard pointed at the training logs and this folder shows the monitors beside the loss:
  ``ckptscan/<monitor>/layer<L>`` per layer (heads reduced as in the reports: the most anomalous
  one), ``ckptscan/<monitor>/layer<L>_head<H>`` for the heads the evidence names, and the
  headline and evidence as text (``ckptscan/verdict``).

Nothing is written inside the run directory.  By default the files go to ``RESULT/export/``.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np

from ckptscan.errors import UsageError
from ckptscan.report import data
from ckptscan.store.timeline import atomic_write

FORMATS = ("csv", "parquet", "tensorboard")
COLUMNS = ("step", "monitor", "layer", "head", "value")
MARKER = "ckptscan-export.json"  # in a TensorBoard export folder: ours to replace on the next export


def default_path(out_dir: Path, fmt: str) -> Path:
    return (
        Path(out_dir)
        / "export"
        / {"csv": "monitors.csv", "parquet": "monitors.parquet", "tensorboard": "tensorboard"}[fmt]
    )


def export_result(result, fmt: str, path: Path | None = None) -> Path:
    """Write ``result``'s monitors in ``fmt`` to ``path`` (default ``default_path``); returns it."""
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt}: one of {', '.join(FORMATS)}")
    path = Path(path) if path is not None else default_path(result.out_dir, fmt)
    run = Path(str(result.summary.get("run", result.run_dir))).resolve()
    if path.resolve() == run or run in path.resolve().parents:
        raise UsageError(
            f"{path} is inside the run directory {run}: ckptscan never writes there; choose another with -o"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    {"csv": _csv, "parquet": _parquet, "tensorboard": _tensorboard}[fmt](result, path)
    return path


def _columns(timeline, name: str):
    """One monitor as the table's columns (steps, layers, heads or None, values), step-major."""
    arr = np.asarray(timeline.get(name), dtype=np.float32)  # [N, L, K]
    n, layers, k = arr.shape
    per_head = data.monitor_info(name).scope == "head" or k > 1
    steps = np.repeat(np.asarray(timeline.steps, dtype=np.int64), layers * k)
    layer = np.tile(np.repeat(np.arange(layers, dtype=np.int32), k), n)
    head = np.tile(np.arange(k, dtype=np.int32), n * layers) if per_head else None
    return steps, layer, head, arr.reshape(-1)


def _csv(result, path: Path) -> None:
    tl = result.timeline

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(COLUMNS)
            for name in tl.names():
                steps, layer, head, values = _columns(tl, name)
                heads = [""] * len(steps) if head is None else head.tolist()
                vals = ["" if not np.isfinite(v) else f"{v:.7g}" for v in values.tolist()]
                w.writerows(
                    zip(steps.tolist(), [name] * len(steps), layer.tolist(), heads, vals, strict=False)
                )

    atomic_write(path, writer=write)


def _parquet(result, path: Path) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError(
            "--format parquet needs the 'pyarrow' package: pip install 'ckptscan[parquet]'"
        ) from None
    tl = result.timeline
    tables = []
    for name in tl.names():
        steps, layer, head, values = _columns(tl, name)
        tables.append(
            pa.table(
                {
                    "step": pa.array(steps),
                    "monitor": pa.array([name] * len(steps)).dictionary_encode(),
                    "layer": pa.array(layer),
                    "head": pa.nulls(len(steps), pa.int32()) if head is None else pa.array(head),
                    "value": pa.array(values, mask=~np.isfinite(values)),
                }
            )
        )
    schema = tables[0].schema if tables else pa.schema([("step", pa.int64())])
    atomic_write(
        path,
        writer=lambda tmp: pq.write_table(pa.concat_tables(tables) if tables else schema.empty_table(), tmp),
    )


def _tensorboard(result, path: Path) -> None:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise UsageError(
            "--format tensorboard needs the 'tensorboard' package: pip install 'ckptscan[tensorboard]'"
        ) from None
    if path.exists():
        if not path.is_dir():
            raise UsageError(f"{path} exists and is not a folder")
        if (path / MARKER).is_file():  # an earlier export of ours: replaced, not appended to
            shutil.rmtree(path)
        elif any(path.iterdir()):
            raise UsageError(
                f"{path} is not empty: give a new folder (e.g. a 'ckptscan' folder beside the training logs)"
            )
    path.mkdir(parents=True, exist_ok=True)
    s, tl = result.summary, result.timeline
    steps = [int(x) for x in tl.steps]
    writer = SummaryWriter(log_dir=str(path))
    try:
        for name in tl.names():
            info = data.monitor_info(name)
            arr = tl.get(name)
            mat = data.layer_matrix(arr, info.direction)  # [L, N]
            for layer in range(mat.shape[0]):
                _scalars(writer, f"ckptscan/{name}/layer{layer:02d}", steps, mat[layer])
            for a in data.alarm_steps(s, name):
                if (
                    a["head"] is not None
                    and arr.shape[2] > 1
                    and 0 <= a["layer"] < arr.shape[1]
                    and 0 <= a["head"] < arr.shape[2]
                ):
                    _scalars(
                        writer,
                        f"ckptscan/{name}/layer{a['layer']:02d}_head{a['head']:02d}",
                        steps,
                        arr[:, a["layer"], a["head"]],
                    )
        writer.add_text("ckptscan/verdict", _verdict_markdown(s), global_step=steps[-1] if steps else 0)
    finally:
        writer.close()
    (path / MARKER).write_text(json.dumps({"result": str(result.out_dir), "run": s.get("run")}))


def _scalars(writer, tag: str, steps: list[int], values) -> None:
    for step, v in zip(steps, np.asarray(values, dtype=np.float64).tolist(), strict=False):
        if np.isfinite(v):
            writer.add_scalar(tag, v, global_step=step)


def _verdict_markdown(s: dict) -> str:
    o = data.outcome(s)
    lines = [f"**{o.headline}**", ""]
    for e in data.verdict(s)["evidence"][:20]:
        lines.append(
            f"- {e.get('monitor')}: layer {e.get('layer')}"
            + ("" if e.get("head") is None else f" head {e.get('head')}")
            + f", first alarm at step {data.evidence_step(e)}"
        )
    return "\n".join(lines)
