"""``ckptscan export``: CSV, Parquet and TensorBoard event files of a stored result, read back with
the readers people use (csv, pyarrow, TensorBoard's own event reader)."""

from __future__ import annotations

import csv
import math

import pytest
from click.testing import CliRunner

from ckptscan.cli import main
from ckptscan.report import data
from tests.test_report import make_result, store


@pytest.fixture
def result_dir(tmp_path):
    return store(make_result(n=12, layers=2, heads=3), tmp_path / "out")


def _export(result_dir, fmt, *extra):
    r = CliRunner().invoke(main, ["export", str(result_dir), "--format", fmt, *extra])
    assert r.exit_code == 0, r.output
    return r


def test_csv_has_a_row_per_step_monitor_layer_and_head(result_dir):
    from ckptscan.api import load_result

    tl = load_result(result_dir).timeline
    r = _export(result_dir, "csv")
    path = result_dir / "export" / "monitors.csv"
    assert r.stdout.strip() == str(path)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["step", "monitor", "layer", "head", "value"]
    assert len(rows) == sum(tl.get(n).size for n in tl.names())
    by = {(int(x["step"]), x["monitor"], int(x["layer"]), x["head"]): x["value"] for x in rows}
    d2 = tl.get("attn.D2.entropy2")
    assert float(by[(int(tl.steps[5]), "attn.D2.entropy2", 1, "2")]) == pytest.approx(
        float(d2[5, 1, 2]), rel=1e-6
    )
    assert (
        by[(int(tl.steps[0]), "attn.D2.entropy2", 0, "0")] == ""
    )  # undefined at the first checkpoint: empty
    assert by[(int(tl.steps[3]), "router.similarity", 1, "")] != ""  # a per-layer monitor has no head


def test_parquet_holds_the_same_table(result_dir):
    pq = pytest.importorskip("pyarrow.parquet")
    from ckptscan.api import load_result

    tl = load_result(result_dir).timeline
    _export(result_dir, "parquet", "-o", str(result_dir / "m.parquet"))
    t = pq.read_table(result_dir / "m.parquet").to_pydict()
    assert list(t) == ["step", "monitor", "layer", "head", "value"]
    assert len(t["step"]) == sum(tl.get(n).size for n in tl.names())
    i = next(
        k
        for k in range(len(t["step"]))
        if t["monitor"][k] == "attn.D2.entropy2"
        and t["step"][k] == tl.steps[5]
        and t["layer"][k] == 1
        and t["head"][k] == 2
    )
    assert t["value"][i] == pytest.approx(float(tl.get("attn.D2.entropy2")[5, 1, 2]))
    assert t["value"][t["monitor"].index("attn.D2.entropy2")] is None  # NaN -> null
    assert t["head"][t["monitor"].index("router.similarity")] is None


def test_tensorboard_events_at_the_training_steps(result_dir):
    from tensorboard.backend.event_processing import event_accumulator as ea

    from ckptscan.api import load_result

    res = load_result(result_dir)
    folder = result_dir / "tb"
    _export(result_dir, "tensorboard", "-o", str(folder))
    _export(result_dir, "tensorboard", "-o", str(folder))  # again: replaced, not appended to
    assert len(list(folder.glob("events.out.tfevents.*"))) == 1
    acc = ea.EventAccumulator(str(folder), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    assert "ckptscan/attn.D2.entropy2/layer01" in tags["scalars"]
    assert "ckptscan/attn.D2.entropy2/layer01_head02" in tags["scalars"]  # the head the evidence names
    events = acc.Scalars("ckptscan/attn.D2.entropy2/layer01")
    expect = data.layer_matrix(res.timeline.get("attn.D2.entropy2"), "down")[1]
    assert [e.step for e in events] == [int(s) for s in res.timeline.steps[1:]]  # the first is undefined
    assert all(math.isclose(e.value, v, rel_tol=1e-6) for e, v in zip(events, expect[1:], strict=False))
    text = acc.Tensors("ckptscan/verdict/text_summary")[0].tensor_proto.string_val[0].decode()
    assert text.startswith("**ANOMALOUS: lowprec_attention") and "attn.D2.entropy2: layer 1 head 2" in text


def test_export_refuses_a_foreign_folder_and_the_run_directory(result_dir, tmp_path):
    busy = tmp_path / "training-logs"
    busy.mkdir()
    (busy / "events.out.tfevents.1.host").write_bytes(b"")
    r = CliRunner().invoke(main, ["export", str(result_dir), "--format", "tensorboard", "-o", str(busy)])
    assert r.exit_code == 2 and "not empty" in r.stderr
    run = tmp_path / "run"
    run.mkdir()
    res = make_result(run=str(run))
    out = store(res, tmp_path / "out2")
    r = CliRunner().invoke(main, ["export", str(out), "--format", "csv", "-o", str(run / "m.csv")])
    assert r.exit_code == 2 and "inside the run directory" in r.stderr and not (run / "m.csv").exists()
    r = CliRunner().invoke(main, ["export", str(tmp_path / "missing"), "--format", "csv"])
    assert r.exit_code == 2


def test_a_missing_optional_package_is_a_usage_error(result_dir, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    r = CliRunner().invoke(main, ["export", str(result_dir), "--format", "parquet"])
    assert r.exit_code == 2 and "pip install 'ckptscan[parquet]'" in r.stderr
