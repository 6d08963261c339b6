"""Reports: terminal, HTML (without a browser: tests/test_html_browser.py has the browser), JUnit,
GitHub Actions, the JSON schema, and the exit codes of analyze/report."""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console

from ckptscan.api import Result, load_result
from ckptscan.cli import main
from ckptscan.discover.checkpoints import Skipped
from ckptscan.judge import detect
from ckptscan.judge.classify import confidence
from ckptscan.judge.detect import REFERENCE_NONE, REFERENCE_STEPS
from ckptscan.judge.verdict import REFERENCE_BASELINE
from ckptscan.report import data, emit
from ckptscan.report.ci import github_annotations, junit_tree, step_summary_markdown, write_junit
from ckptscan.report.html import build_payload, render_html, to_json, write_html
from ckptscan.report.schema import summary_schema, validate
from ckptscan.report.terminal import BLOCKS, print_result
from ckptscan.store.timeline import Timeline, atomic_write
from tests.runs import make_run


def make_result(
    n=60, layers=3, heads=4, anomalous=True, skipped=(), findings=(), run="/nonexistent/run", curve=True
) -> Result:
    """A stored result of the shape analyze writes: one head's D2 entropy collapses from n/2 on."""
    rng = np.random.default_rng(0)
    steps = np.arange(1, n + 1) * 10
    series = {}
    for name in ("attn.D2.entropy2", "attn.M.entropy2", "attn.M.spectral_norm"):
        a = 0.8 + 0.01 * rng.standard_normal((n, layers, heads))
        if anomalous and name == "attn.D2.entropy2":
            a[n // 2 :, 1, 2] -= np.linspace(0.05, 0.5, n - n // 2)
        if name == "attn.D2.entropy2":
            a[0] = np.nan
        series[name] = a
    series["router.similarity"] = 0.1 + 0.01 * rng.standard_normal((n, layers, 1))
    series["numerics.nonfinite"] = np.zeros((n, layers, 1))
    tl = Timeline.from_arrays(steps, series, {})
    first = int(steps[n // 2 + 2]) if anomalous else None
    div = int(steps[-5]) if anomalous else None
    summary = {
        "schema": "ckptscan/1",
        "ckptscan_version": "0.1.0",
        "run": run,
        "out": "/tmp/out",
        "command": ["ckptscan", "analyze", run],
        "layout": {"family": "mixtral"},
        "device": "cpu",
        "checkpoints": {
            "analyzed": n,
            "reused": 0,
            "steps": steps.tolist(),
            "skipped": [{"path": p, "reason": "truncated header", "error": True} for p in skipped],
        },
        "monitors": tl.names(),
        "findings": list(findings),
        "verdict": {
            "anomalous": anomalous,
            "earliest_step": first,
            "fault_type": "lowprec_attention" if anomalous else "healthy",
            "confidence": 0.9 if anomalous else confidence("healthy"),
            "evidence": [
                {
                    "monitor": "attn.D2.entropy2",
                    "layer": 1,
                    "head": 2,
                    "first_alarm_step": first,
                    "score": 8.25,
                }
            ]
            if anomalous
            else [],
        },
        "loss": {"divergence_step": div, "log_only_alarm_step": int(steps[-3]) if anomalous else None},
        "lead_time_steps": (div - first) if anomalous else None,
        "log_only_lead_time_steps": -20 if anomalous else None,
        "elapsed_s": 1.5,
    }
    if curve:
        summary["loss"]["curve"] = {"steps": steps.tolist(), "loss": (3.0 - 0.001 * steps).tolist()}
    return Result(Path(run), Path("/tmp/out"), summary, tl, [Skipped(p, "truncated header") for p in skipped])


def render_terminal(result, width=100, quiet=False) -> str:
    buf = io.StringIO()
    print_result(result, Console(file=buf, width=width, no_color=True, highlight=False), quiet=quiet)
    return buf.getvalue()


# --- data helpers against slow references ---------------------------------------------------------


def test_layer_matrix_takes_the_anomalous_extreme_over_heads():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((7, 3, 5))
    a[2, 1, :] = np.nan
    for direction, ref in (("down", min), ("up", max)):
        m = data.layer_matrix(a, direction)
        for t in range(7):
            for layer in range(3):
                vals = [v for v in a[t, layer] if not np.isnan(v)]
                expect = ref(vals) if vals else np.nan
                assert m[layer, t] == pytest.approx(expect, nan_ok=True)
    assert data.layer_matrix(a, "both")[0, 0] == pytest.approx(a[0, 0].mean())


def test_reduce_columns_and_downsample_keep_extremes():
    rng = np.random.default_rng(4)
    mat = rng.standard_normal((2, 1000))
    mat[1, 777] = -50.0
    steps = np.arange(1000) * 3
    xs, red = data.reduce_columns(mat, steps, 64, "down")
    assert red.shape == (2, 64) and len(xs) == 64
    assert red[1].min() == -50.0  # the dip survives binning
    # every column is the min over a contiguous block of steps, blocks covering everything once
    edges = [int(np.searchsorted(steps, x)) for x in xs] + [1000]
    for j in range(64):
        assert red[0, j] == mat[0, edges[j] : edges[j + 1]].min()
    y = rng.standard_normal(5000)
    y[1234], y[4321] = 99.0, -99.0
    x = np.arange(5000)
    dx, dy = data.downsample_xy(x, y, 300)
    assert len(dx) <= 300 and 99.0 in dy and -99.0 in dy
    assert np.all(np.diff(dx) > 0)  # still in step order
    assert all(y[int(i)] == v for i, v in zip(dx, dy, strict=False))


def test_deviation_is_robust_units_in_the_anomalous_direction():
    row = np.array([1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 0.0, 2.0])
    base = row[:3]
    med = np.median(base)
    mad = 1.4826 * np.median(np.abs(base - med))
    down = data.deviation(row[None], "down", baseline_frac=0.0)[0]
    up = data.deviation(row[None], "up", baseline_frac=0.0)[0]
    both = data.deviation(row[None], "both", baseline_frac=0.0)[0]
    assert down[6] == pytest.approx((med - 0.0) / mad) and down[7] == 0.0
    assert up[7] == pytest.approx((2.0 - med) / mad) and up[6] == 0.0
    assert both[6] == pytest.approx(down[6]) and both[7] == pytest.approx(up[7])


def test_leading_monitors_evidence_first_then_defaults():
    s = make_result().summary
    names = ["attn.M.entropy2", "attn.D2.entropy2", "router.similarity", "attn_rope.D2.entropy2"]
    assert data.leading_monitors(s, names, k=4) == [
        "attn.D2.entropy2",
        "attn_rope.D2.entropy2",
        "attn.M.entropy2",
        "router.similarity",
    ]
    s["verdict"]["evidence"] = [{"monitor": "router.similarity"}]
    assert data.leading_monitors(s, names, k=1) == ["router.similarity"]


def test_evidence_names_the_jump_shape_and_its_factor():
    """A jump alarm's score is a factor, not a z, and the shape it was read in is named; summaries
    written before the shape was stored read as a plain jump."""
    m = "attn.q.update_ratio"
    assert data.evidence_monitor({"monitor": m, "test": "shift"}) == m
    assert data.evidence_monitor({"monitor": m, "test": "jump"}) == f"{m} (jump: score = factor)"
    assert (
        data.evidence_monitor({"monitor": m, "test": "jump", "shape": "jump"})
        == f"{m} (jump: score = factor)"
    )
    assert data.evidence_monitor({"monitor": m, "test": "jump", "shape": "straddle"}) == (
        f"{m} (jump between two saves: score = factor)"
    )
    assert data.evidence_monitor({"monitor": m, "test": "jump", "shape": "spike"}) == (
        f"{m} (one-checkpoint spike: score = factor)"
    )
    assert data.evidence_monitor({"monitor": m, "test": "jump", "shape": "straddle_spike"}) == (
        f"{m} (spike between two saves: score = factor)"
    )
    d = "attn.D2.entropy2"
    assert data.evidence_monitor({"monitor": d, "test": "depth"}) == f"{d} (depth: score = fall factor)"
    assert data.evidence_monitor({"monitor": m, "test": "rise"}) == f"{m} (slow rise: score = factor)"
    assert (
        data.evidence_monitor({"monitor": m, "test": "lift"})
        == f"{m} (lift off a held level: score = factor)"
    )
    assert data.evidence_monitor({"monitor": d, "test": "fall"}) == f"{d} (slow fall: score = entropy drop)"
    high = {"monitor": d, "test": "fall", "shape": "high"}
    assert data.evidence_monitor(high) == f"{d} (slow fall from its settled high: score = entropy drop)"
    peak = {"monitor": d, "test": "fall", "shape": "peak"}
    assert data.evidence_monitor(peak) == f"{d} (fall since the warm-up's peak: score = entropy drop)"


def test_an_uncounted_jump_is_shown_in_every_report():
    """The verdict's ``uncounted_jump`` note reaches the terminal, the HTML page and the CI
    summary and annotations, and the summary with it still validates against the schema."""
    res = make_result(anomalous=False)
    note = "the whole model's step size jumped x3.0 or more at step 300: not counted"
    res.summary["verdict"]["uncounted_jump"] = {"step": 300, "factor": 3.0, "layers": [0, 1], "note": note}
    res.summary["verdict"]["confidence"] = 0.17  # a low one (``HEALTHY_JUMP``)
    assert validate(json.loads(json.dumps(res.summary))) == []
    assert f"not counted: {note}" in " ".join(render_terminal(res, width=400).split())
    assert "not counted: the whole model&#x27;s step size" in render_html(res) or (
        "not counted: the whole model&#39;s step size" in render_html(res)
    )
    assert note in step_summary_markdown(res)
    assert any("step-size jump not counted" in line for line in github_annotations(res))
    # --quiet prints the headline only: the headline says so (it used to read plain healthy)
    quiet = " ".join(render_terminal(res, width=400, quiet=True).split())
    headline = (
        "HEALTHY: no sustained anomaly in the monitors; but a step-size jump at step 300 was not counted"
    )
    # the low confidence is the verdict's, not the jump's: the headline says whose
    assert quiet == headline + ", so 'healthy' holds at confidence 0.17 only (see the report)"
    del res.summary["verdict"]["uncounted_jump"]
    assert "not counted" not in render_terminal(res, width=400) and note not in step_summary_markdown(res)
    # without the jump, the healthy headline still says how sure it is (the verdict's own confidence)
    assert render_terminal(res, width=400, quiet=True).strip() == (
        "HEALTHY: no sustained anomaly in the monitors (confidence 0.17)"
    )
    res.summary["verdict"]["confidence"] = None  # an older summary without one: no number invented
    assert (
        render_terminal(res, width=400, quiet=True).strip() == "HEALTHY: no sustained anomaly in the monitors"
    )


def test_alarms_after_the_divergence_and_the_log_only_count_are_marked():
    """An evidence row whose excursion began at or after the loss's divergence step says little
    about the cause (after the divergence everything moves): the terminal and HTML tables say
    "(after divergence)"; a numpy or JSON-float step reads the same. The log-only rule's first alarm is given with
    how many it raised ("first of 3"): one alarm in the warm-up, which healthy runs raise too, read
    as a lead of thousands of steps."""
    res = make_result()  # one alarm at steps[32], divergence at steps[-5]
    ev = res.summary["verdict"]["evidence"][0]
    div = res.summary["loss"]["divergence_step"]
    assert data.evidence_step_text(res.summary, ev) == str(ev["first_alarm_step"])
    ev["first_alarm_step"] = div
    assert data.evidence_step_text(res.summary, ev) == f"{div} (after divergence)"
    assert f"{div} (after divergence)" in render_terminal(res, width=400)
    assert f"{div} (after divergence)" in render_html(res)
    ev["first_alarm_step"] = np.int64(div)
    res.summary["loss"]["divergence_step"] = float(div)
    assert data.evidence_step_text(res.summary, ev) == f"{div} (after divergence)"
    res.summary["loss"]["divergence_step"] = div
    first = res.summary["loss"]["log_only_alarm_step"]
    assert data.log_only_text(res.summary) == str(first)  # no list of alarms: the first alone
    loss = res.summary["loss"]
    loss["log_only_alarm_step"], loss["log_only_alarm_steps"] = 100, [100, 200, 300, div + 10]
    assert "log-only detector alarm 100 (first of 3 up to the divergence)" in render_terminal(res, width=400)
    loss["divergence_step"] = None
    assert data.log_only_text(res.summary) == "100 (first of 4)"
    loss["log_only_alarm_steps"] = list(range(100, 100 + 200 * 10, 10))  # summary.json lists 200 at most
    assert data.log_only_text(res.summary) == "100 (first of 200 or more)"
    loss["log_only_alarm_step"] = None
    assert data.log_only_text(res.summary) == "-"


def test_the_report_says_which_steps_were_examined():
    """A verdict speaks for the steps examined: the terminal and the HTML page say from which step
    (and where the run settled), and name layers never examined; nothing where the summary has no
    coverage (an older summary)."""
    res = make_result(anomalous=False)
    assert data.examined_text(res.summary) is None
    assert "examined from" not in render_terminal(res, width=400)
    cov = {"settled_step": 120, "first_examined_step": 200, "layers_not_examined": [2]}
    res.summary["detection"] = {"coverage": cov}
    line = "examined from step 200 (the run settled at step 120)"
    line += "; layer(s) [2] not examined (settled too late, or never)"
    assert data.examined_text(res.summary) == line
    assert line in " ".join(render_terminal(res, width=400).split())
    assert "examined from step 200" in render_html(res)
    res.summary["detection"]["coverage"] = dict(cov, first_examined_step=None, layers_not_examined=[])
    assert data.examined_text(res.summary) == "nothing examined (the run settled at step 120)"


def test_loss_curve_from_log_file_or_absent(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        "\n".join(json.dumps({"step": i, "loss": 2.0 + i / 100}) for i in range(1, 21))
    )
    c = data.loss_curve({"run": str(tmp_path), "loss": {}})
    assert c is not None and list(c.steps) == list(range(1, 21)) and c.loss[0] == pytest.approx(2.01)
    assert data.loss_curve({"run": str(tmp_path / "gone"), "loss": {}}) is None


# --- terminal -------------------------------------------------------------------------------------


def test_terminal_report_order_width_and_no_colour():
    out = render_terminal(make_result(n=300))
    lines = out.splitlines()
    assert lines[0].startswith("ANOMALOUS: lowprec_attention (confidence 0.90), earliest anomalous step 1530")
    assert max(len(x) for x in lines) <= 100
    assert "\x1b[" not in out
    assert "lead time" in out and "log-only detector alarm 2980 (lead -20)" in out
    ev = next(x for x in lines if "attn.D2.entropy2" in x and "│" in x)
    assert re.search(r"│\s+1\s+│\s+2\s+│\s+1530\s+│\s+8\.25\s+│", ev)
    # the heat strip: layer 1 rises to full blocks after the collapse, the other layers stay low
    start = lines.index(next(x for x in lines if x.startswith("attn.D2.entropy2  [")))
    strip = {x.split()[0]: x[6:] for x in lines[start + 1 : start + 4]}
    assert set(strip) == {"L0", "L1", "L2"}
    assert strip["L1"].rstrip().endswith(BLOCKS[-1] * 10)
    assert BLOCKS[-1] not in strip["L0"] and BLOCKS[-1] not in strip["L2"]
    assert strip["L1"][:40].count(BLOCKS[-1]) == 0
    assert "^" in lines[start + 4] and "D" in lines[start + 4]


def test_terminal_quiet_healthy_and_skipped():
    res = make_result(anomalous=False, skipped=["checkpoint-7/model.safetensors"])
    assert render_terminal(res, quiet=True).strip() == (
        "HEALTHY: no sustained anomaly in the monitors (confidence 0.92); 1 input could not be read"
    )
    out = render_terminal(res)
    assert "skipped (1)" in out and "checkpoint-7/model.safetensors: truncated header" in out
    assert "^" not in out  # no markers in a healthy run


def test_terminal_no_color_env_in_a_terminal(monkeypatch):
    from ckptscan.cli import _console

    monkeypatch.setenv("NO_COLOR", "1")
    con = _console()
    buf = io.StringIO()
    con.file = buf
    con._force_terminal = True
    print_result(make_result(), con)
    assert "\x1b[3" not in buf.getvalue() and "\x1b[9" not in buf.getvalue()  # no colour codes


# --- HTML without a browser ----------------------------------------------------------------------


def _split_html(page: str):
    """(plotly.js unpacked, the app, the payload, the page without the packed plotly.js)."""
    (app,) = re.findall(r"<script>(.*?)</script>", page, flags=re.DOTALL)
    packed = re.search(
        r'<script type="application/octet-stream" id="plotly-gz">(.*?)</script>', page, flags=re.DOTALL
    ).group(1)
    m = re.search(r'<script type="application/json" id="ckptscan-data">(.*?)</script>', page, flags=re.DOTALL)
    plotly_js = gzip.decompress(base64.b64decode(packed)).decode()
    return plotly_js, app, json.loads(m.group(1)), page.replace(packed, "")


def test_html_is_self_contained_and_carries_the_data():
    res = make_result(run="/runs/a</script><b>x")
    page = render_html(res)
    plotly_js, _app, payload, rest = _split_html(page)
    assert "Plotly" in plotly_js and len(plotly_js) > 1_000_000
    from plotly.offline import get_plotlyjs

    assert plotly_js == get_plotlyjs()  # the library itself, packed (2.0 MB instead of 4.8 MB)
    assert len(page) < 2_300_000, len(page)
    # nothing outside the plotly.js library points anywhere: no src=, href=, url(), http(s) links
    assert not re.search(r"https?://", rest.replace("http-equiv", ""))
    assert not re.search(r"\b(src|href)\s*=", rest) and "url(" not in rest and "@import" not in rest
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert "&lt;/script&gt;&lt;b&gt;x" in page and "<b>x" not in page  # the run path is escaped
    # the numbers: D2 layer 1 of the heatmap is the min over heads, 4 significant digits
    fam = next(f for f in payload["families"] if f["family"] == "attention")
    d2 = next(m for m in fam["monitors"] if m["monitor"] == "attn.D2.entropy2")
    arr = res.timeline.get("attn.D2.entropy2")
    assert d2["x"] == res.timeline.steps.tolist()
    assert d2["z"][1][0] is None  # first checkpoint of a pair monitor: undefined
    for t in range(1, 60):
        assert d2["z"][1][t] == pytest.approx(float(np.nanmin(arr[t, 1])), rel=6e-4)
    heads = payload["heads"][0]
    assert heads["monitor"] == "attn.D2.entropy2" and len(heads["layers"]) == 3
    assert heads["layers"][1][2][-1] == pytest.approx(float(arr[-1, 1, 2]), rel=6e-4)
    tl = payload["timelines"][0]
    assert tl["monitor"] == "attn.D2.entropy2" and tl["alarms"] == [{"layer": 1, "head": 2, "step": 330}]
    assert any(t["layer"] == 1 and t["head"] == 2 and t["emph"] for t in tl["traces"])
    assert payload["loss"]["x"][:3] == [10, 20, 30]
    assert payload["markers"] == {
        "earliest_step": 330,
        "divergence_step": 560,
        "log_only_alarm_step": 580,
        "first_examined_step": None,  # this result keeps no coverage
    }


def test_heatmaps_carry_the_departure_and_a_scale_that_shows_it():
    """Linear value scales hide an onset in a series that drifts; the departure from the layer's
    early level (the terminal strips' scale) shows it.  Values spanning decades get a log scale, a
    count that stayed 0 a 0..1 scale."""
    res = make_result()
    payload = _split_html(render_html(res))[2]
    mons = {m["monitor"]: m for f in payload["families"] for m in f["monitors"]}
    d2 = mons["attn.D2.entropy2"]
    assert d2["dev_label"] == "sigmas from early level" and d2["scale"]["type"] == "linear"
    dev = np.array([[np.nan if v is None else v for v in row] for row in d2["dev"]])
    # layer 1's collapse (from checkpoint 30 on) stands far above anything the other layers' noise reaches
    assert np.nanmin(dev[1, 40:]) > 2 * max(np.nanmax(dev[0]), np.nanmax(dev[2]), np.nanmax(dev[1, :25]))
    assert mons["numerics.nonfinite"]["scale"] == {"type": "linear", "min": 0.0, "max": 1.0}
    from ckptscan.report.html import _scale

    assert _scale(np.array([1e-4, 1e-3, np.nan, 0.5]))["type"] == "log"
    assert _scale(np.array([-1.0, 5.0]))["type"] == "linear"


def test_run_vs_baseline_view():
    """A baseline run (--baseline's stored analysis, or one given to render_html) is drawn beside the
    run: the layers the evidence names, this run's series and the baseline's."""
    res, base = make_result(), make_result(anomalous=False)
    assert _split_html(render_html(res))[2]["baseline"] is None
    view = build_payload(res, baseline=("healthy twin", base.timeline))["baseline"]
    assert view["label"] == "healthy twin"
    first = view["monitors"][0]
    assert first["monitor"] == "attn.D2.entropy2" and [t["layer"] for t in first["traces"]] == [1]
    run_y = data.layer_matrix(res.timeline.get("attn.D2.entropy2"), "down")[1]
    base_y = data.layer_matrix(base.timeline.get("attn.D2.entropy2"), "down")[1]
    trace = first["traces"][0]
    assert trace["run"]["y"].a[-1] == run_y[-1] and trace["base"]["y"].a[-1] == base_y[-1]


def test_run_vs_baseline_from_the_judgements_reference_run(tmp_path):
    res, base = make_result(), make_result(anomalous=False)
    base.timeline.save(tmp_path / "timeline.h5")
    res.summary["detection"] = {
        "baseline": "reference-run",
        "reference_run": "/runs/healthy",
        "reference_out": str(tmp_path),
    }
    payload = _split_html(render_html(res))[2]
    assert payload["baseline"]["label"] == "/runs/healthy" and payload["baseline"]["monitors"]
    res.summary["detection"]["reference_out"] = str(tmp_path / "gone")  # a report renders without it
    assert _split_html(render_html(res))[2]["baseline"] is None


def test_html_says_how_long_this_invocation_took_and_what_it_reused():
    res = make_result()
    res.summary.update(started_at="2025-01-02T03:04:05Z", elapsed_s=0.84)
    res.summary["checkpoints"]["reused"] = 58
    assert (
        "started 2025-01-02T03:04:05Z, 0.8 s in this invocation "
        "(58 of 60 checkpoints reused from earlier runs)"
    ) in render_html(res)


def test_to_json_rounds_and_escapes():
    from ckptscan.report.html import _Arr

    text = to_json({"a": _Arr(np.array([1.23456789, np.nan, np.inf, -2.5e-7, 12345678.0])), "s": "</script>"})
    assert "</" not in text
    back = json.loads(text)
    assert back["a"] == [1.235, None, None, -2.5e-07, 1.235e07] and back["s"] == "</script>"


def test_html_large_run_stays_small(tmp_path):
    """3000 checkpoints x 24 layers x 16 heads: the page stays a few MB (plotly.js packed: 2.0 MB)."""
    n, layers, heads = 3000, 24, 16
    rng = np.random.default_rng(0)
    steps = np.arange(1, n + 1)
    series = {
        name: rng.random((n, layers, heads), dtype=np.float32)
        for name in ("attn.D2.entropy2", "attn.M.entropy2", "attn.M.spectral_norm")
    }
    res = make_result()
    res.timeline = Timeline(steps, series, {})
    res.summary["checkpoints"]["steps"] = steps.tolist()
    res.summary["monitors"] = sorted(series)
    path = write_html(res, tmp_path / "big.html")
    size = path.stat().st_size
    assert size < 8_000_000, size  # 6.97 MB (9.63 MB with plotly.js unpacked)
    payload = _split_html(path.read_text())[2]
    assert all(len(m["x"]) <= 600 for f in payload["families"] for m in f["monitors"])
    assert all(len(t["x"]) <= 2000 for tl in payload["timelines"] for t in tl["traces"])


# --- CI: JUnit, GitHub Actions ------------------------------------------------------------------------


def _cases(tree):
    suite = tree.getroot().find("testsuite")
    return suite, {c.get("name"): c for c in suite.findall("testcase")}


def test_junit_anomalous_run(tmp_path):
    finding = {"kind": "nonfinite", "step": 400, "layer": 0, "nonfinite": 3, "tensors": ["q_proj"]}
    res = make_result(skipped=["checkpoint-9"], findings=[finding])
    path = write_junit(res, tmp_path / "j.xml")
    tree = ET.parse(path)
    suite, cases = _cases(tree)
    assert set(cases) == {"verdict", "attention", "router", "numerics", "inputs"}
    assert cases["verdict"].find("failure") is not None
    assert "lowprec_attention" in cases["verdict"].find("failure").get("message")
    assert (
        "attn.D2.entropy2: layer 1 head 2, first alarm at step 330" in cases["attention"].find("failure").text
    )
    assert cases["router"].find("failure") is None
    assert "3 NaN/Inf values" in cases["numerics"].find("failure").text
    assert "checkpoint-9: truncated header" in cases["inputs"].find("error").text
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("5", "3", "1")


def test_junit_healthy_run_has_no_failures():
    suite, cases = _cases(junit_tree(make_result(anomalous=False)))
    assert suite.get("failures") == "0" and suite.get("errors") == "0"
    assert all(c.find("failure") is None and c.find("error") is None for c in cases.values())


def _gh_unescape(s: str) -> str:  # GitHub's documented escapes, reversed
    return (
        s.replace("%0A", "\n")
        .replace("%0D", "\r")
        .replace("%3A", ":")
        .replace("%2C", ",")
        .replace("%25", "%")
    )


def test_github_annotations_and_escaping():
    res = make_result(skipped=["a,b:c%"])
    lines = github_annotations(res)
    assert all("\n" not in x for x in lines)
    m = re.fullmatch(r"::error title=([^:]*)::(.*)", lines[0])
    assert m and _gh_unescape(m.group(1)) == "ckptscan: anomalous"
    assert _gh_unescape(m.group(2)).splitlines()[:2] == [
        (
            "anomalous: lowprec_attention (confidence 0.90), earliest anomalous step 330; "
            "1 input could not be read"
        ),
        "loss diverged at step 560, lead time 230 steps",
    ]
    m = re.fullmatch(r"::error title=([^:]*)::(.*)", lines[1])
    assert _gh_unescape(m.group(2)) == "a,b:c%: truncated header"
    healthy = github_annotations(make_result(anomalous=False))
    assert healthy[0].startswith("::notice ")
    many = github_annotations(make_result(skipped=[f"c{i}" for i in range(15)]))
    assert len(many) == 1 + 10 + 1 and many[-1].startswith("::warning ")


def test_emit_under_github_actions(tmp_path, monkeypatch, capsys):
    summary_file = tmp_path / "step_summary.md"
    summary_file.write_text("previous step\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary_file))
    res = make_result()
    emit(res, as_json=True, quiet=False, html_file=None, junit_file=tmp_path / "j.xml", console=Console())
    out, err = capsys.readouterr()
    assert json.loads(out)["verdict"]["anomalous"] is True  # stdout stays pure JSON
    assert "::error title=" in err and "JUnit XML:" in err
    md = summary_file.read_text()
    assert md.startswith("previous step\n## ckptscan: ")  # appended, not overwritten
    assert "| attn.D2.entropy2 | 1 | 2 | 330 | 8.25 |" in md
    assert md.count("|---") >= 2
    # terminal mode: annotations on stdout after the report; without GITHUB_ACTIONS, none
    emit(res, as_json=False, quiet=True, html_file=None, junit_file=None, console=Console(file=io.StringIO()))
    assert "::error title=" in capsys.readouterr().out
    monkeypatch.delenv("GITHUB_ACTIONS")
    emit(res, as_json=True, quiet=True, html_file=None, junit_file=None, console=Console())
    assert "::" not in capsys.readouterr().err


def test_step_summary_healthy():
    md = step_summary_markdown(make_result(anomalous=False))
    assert md.startswith("## ckptscan: ✅ healthy\n") and "### Evidence" not in md


# --- the JSON schema ---------------------------------------------------------------------------------


def test_a_lift_verdict_validates_and_reads_as_a_factor(tmp_path):
    """A verdict the lift rule made (``detect.lift_alarms``, on the synthetic run of its test) put
    in a summary validates against the schema (its ``test`` "lift" was missing there, and such a
    stored result could not be opened again), and its evidence reads as a factor."""
    from ckptscan.judge.verdict import judge
    from ckptscan.store.timeline import Timeline
    from tests.test_detect import _lifted_run

    steps, _, raised = _lifted_run(0)
    v = judge(tmp_path, Timeline.from_arrays(steps, raised), [])["verdict"]
    assert v["decision"] == "high_lr/lift"
    res = make_result()
    res.summary["verdict"] = json.loads(json.dumps(v))
    assert validate(json.loads(json.dumps(res.summary))) == []
    lifted = [e for e in v["evidence"] if e["test"] == "lift"]
    assert lifted and all(data.score_text(e).startswith("x") for e in lifted)


@pytest.mark.parametrize(
    ("shape", "onset", "drop", "over", "words"),
    [("high", 905, 0.2, 600, "settled high"), ("peak", 455, 0.3, 250, "warm-up's peak")],
)
def test_a_fall_read_from_a_high_validates(tmp_path, shape, onset, drop, over, words):
    """A verdict a fall read from a high made, on the synthetic run of its rule's test (evidence
    of test "fall" with shape "high": ``Params.fall_high``; "peak": ``Params.fall_peak``), put in a
    summary validates against the schema (the shape "high" was missing there once, and such a
    stored result could not be opened again: a corpus part's runs read so failed ``score.py
    --stored``), and its evidence says which fall.  The "peak" reading is off by default since the
    ``holdout63`` freeze; summaries stored under the rules before it, or with it set, still hold it."""
    from ckptscan.judge.detect import Params
    from ckptscan.judge.verdict import judge
    from ckptscan.store.timeline import Timeline
    from tests.test_detect import _fine_run, _slow_wear

    steps, s = _fine_run(0, n=150, warmup=150)
    params = Params(fall_peak=0.2) if shape == "peak" else Params()
    t = Timeline.from_arrays(steps, _slow_wear(s, steps, onset, drop, over))
    v = judge(tmp_path, t, [], params=params)["verdict"]
    fell = [e for e in v["evidence"] if e["test"] == "fall" and e.get("shape") == shape]
    assert v["decision"] == "lowprec_attention" and fell
    res = make_result()
    res.summary["verdict"] = json.loads(json.dumps(v))
    assert validate(json.loads(json.dumps(res.summary))) == []
    assert all(words in data.evidence_monitor(e) for e in fell)


def test_schema_is_draft_2020_12_and_accepts_our_summaries():
    sch = summary_schema()
    assert sch["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    for res in (make_result(), make_result(anomalous=False, skipped=["x"])):
        assert validate(json.loads(res.to_json())) == []


@pytest.mark.parametrize(
    "mutate, expect",
    [
        (lambda s: s.pop("verdict"), "missing required key 'verdict'"),
        (lambda s: s["verdict"].update(fault_type="gremlins"), "$.verdict.fault_type"),
        (lambda s: s["verdict"].update(anomalous="yes"), "expected boolean"),
        (lambda s: s["verdict"].update(confidence=1.5), "maximum"),
        (lambda s: s["checkpoints"]["skipped"].append({"path": "x"}), "missing required key 'reason'"),
        (lambda s: s["verdict"]["evidence"][0].update(layer="one"), "$.verdict.evidence[0].layer"),
        (lambda s: s["loss"].update(divergence_step=-3), "minimum"),
        (lambda s: s.update(schema="ckptscan/2"), "$.schema"),
        (
            lambda s: s.update(outcome={"state": "fine", "headline": "FINE", "unreadable_inputs": 0}),
            "$.outcome.state",
        ),
    ],
)
def test_schema_rejects_broken_summaries(mutate, expect):
    s = json.loads(make_result().to_json())
    mutate(s)
    errors = validate(s)
    assert errors and any(expect in e for e in errors), errors


def test_validator_refuses_keywords_it_does_not_implement():
    with pytest.raises(ValueError, match="pattern"):
        validate("x", {"type": "string", "pattern": "^a"})
    assert validate(None, {"anyOf": [{"type": "integer"}, {"type": "null"}]}) == []
    assert validate("x", {"anyOf": [{"type": "integer"}, {"type": "null"}]})


# --- CLI: exit codes, stored results, every JSON output valid ------------------------------------------


def store(res: Result, out: Path) -> Path:
    """Write a result the way analyze does, for ``ckptscan report``."""
    out.mkdir(parents=True, exist_ok=True)
    res.summary["out"] = str(out)
    res.timeline.save(out / "timeline.h5")
    atomic_write(out / "summary.json", res.to_json())
    return out


@pytest.mark.parametrize(
    "anomalous, skipped, fail_on, code",
    [
        (True, [], "anomaly", 1),
        (True, ["x"], "anomaly", 1),
        (False, ["x"], "anomaly", 3),
        (False, [], "anomaly", 0),
        (True, [], "input-error", 0),
        (True, ["x"], "input-error", 3),
        (True, ["x"], "never", 0),
    ],
)
def test_report_command_exit_codes(tmp_path, anomalous, skipped, fail_on, code):
    out = store(make_result(anomalous=anomalous, skipped=skipped), tmp_path / "out")
    r = CliRunner().invoke(main, ["report", str(out), "--json", "--fail-on", fail_on])
    assert r.exit_code == code, r.output
    assert validate(json.loads(r.stdout)) == []


def test_report_command_writes_files_and_renders_without_recomputing(tmp_path):
    out = store(make_result(), tmp_path / "out")
    html, junit = tmp_path / "r.html", tmp_path / "r.xml"
    r = CliRunner().invoke(main, ["report", str(out), "--html", str(html), "--junit", str(junit)])
    assert r.exit_code == 0, r.output  # report defaults to --fail-on never
    assert r.stdout.startswith("ANOMALOUS: lowprec_attention")
    assert html.stat().st_size > 1_000_000 and ET.parse(junit).getroot().tag == "testsuites"
    assert load_result(out).summary == json.loads((out / "summary.json").read_text())


def test_report_on_a_folder_without_results_is_a_usage_error(tmp_path):
    r = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert r.exit_code == 2 and "no summary.json" in r.output


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    run = make_run(root / "run", n=3)
    bad = make_run(root / "bad", n=3)
    f = bad / "checkpoint-200" / "model.safetensors"
    f.write_bytes(f.read_bytes()[:50])  # truncated: unreadable
    return run, bad


def test_analyze_exit_codes_follow_the_result(tiny_run, tmp_path):
    run, bad = tiny_run
    r = CliRunner().invoke(main, ["analyze", str(run), "-o", str(tmp_path / "a"), "--json"])
    s = json.loads(r.stdout)
    assert validate(s) == [] and validate(json.loads((tmp_path / "a" / "summary.json").read_text())) == []
    assert r.exit_code == (
        1 if s["verdict"]["anomalous"] else 5 if s["verdict"]["fault_type"] == "inconclusive" else 0
    )
    r = CliRunner().invoke(main, ["analyze", str(bad), "-o", str(tmp_path / "b"), "--json"])
    s = json.loads(r.stdout)
    assert validate(s) == []
    assert [x["path"] for x in s["checkpoints"]["skipped"] if x["error"]]
    assert r.exit_code == (1 if s["verdict"]["anomalous"] else 3)
    for fail_on, code in (("never", 0), ("input-error", 3)):
        r = CliRunner().invoke(
            main, ["analyze", str(bad), "-o", str(tmp_path / "b"), "-q", "--fail-on", fail_on]
        )
        assert r.exit_code == code, r.output


def test_terminal_strip_of_a_trending_series_shows_the_detector_score():
    """Update ratios shrink 20 % per checkpoint in healthy training; growth from checkpoint 10 on
    never brings them back to their early level, so a distance from the early baseline shows
    nothing.  The strip shows the detector's score against the trend: low before, high after."""
    n, layers = 16, 2
    t = np.arange(n)
    dlog = np.where(t < 10, -0.2, 0.25)
    level = np.concatenate([[0.0], np.cumsum(dlog[1:])])
    rng = np.random.default_rng(1)
    ratio = 0.5 * np.exp(level[:, None, None] + 0.01 * rng.standard_normal((n, layers, 4)))
    ratio[0] = np.nan
    assert ratio[-1, 0, 0] < ratio[1, 0, 0]  # never back at its early level
    res = make_result(n=n, layers=layers)
    res.timeline = Timeline.from_arrays(
        res.timeline.steps,
        {**{k: res.timeline.get(k) for k in res.timeline.names()}, "attn.q.update_ratio": ratio},
        {},
    )
    # the scores the judgement stores with the timeline (the report renders them, never recomputes)
    res.timeline.scores = {"attn.q.update_ratio": detect.layer_scores(res.timeline, "attn.q.update_ratio")}
    res.summary["verdict"]["evidence"] = [
        {
            "monitor": "attn.q.update_ratio",
            "layer": 0,
            "head": None,
            "first_alarm_step": int(res.timeline.steps[10]),
            "score": 9.0,
        }
    ]
    lines = render_terminal(res).splitlines()
    start = lines.index(next(x for x in lines if x.startswith("attn.q.update_ratio  [")))
    assert "detector score, per layer" in lines[start]
    row = lines[start + 1][6 : 6 + n]
    assert row[0] == " " and set(row[1:10]) == {BLOCKS[0]}, row  # undefined at the first checkpoint
    assert all(BLOCKS.index(c) >= 3 for c in row[10:13]), row


def test_detector_scores_are_the_stored_scores_of_rate_series_only():
    res = make_result(n=20)
    tl = Timeline.from_arrays(
        res.timeline.steps,
        {
            **{k: res.timeline.get(k) for k in res.timeline.names()},
            "attn.q.update_ratio": np.full((20, 3, 4), 0.1),
        },
        {},
    )
    assert (
        data.detector_scores(res.summary, tl, "attn.q.update_ratio") is None
    )  # none stored: never recomputed
    stored = np.arange(60, dtype=np.float32).reshape(20, 3)
    tl.scores = {"attn.q.update_ratio": stored, "attn.D2.entropy2": stored}
    np.testing.assert_array_equal(data.detector_scores(res.summary, tl, "attn.q.update_ratio"), stored.T)
    assert data.detector_scores(res.summary, tl, "attn.D2.entropy2") is None  # a level: display scale
    assert data.detector_scores(res.summary, tl, "router.similarity") is None  # no detector


# --- one headline, the same in every output ----------------------------------------------------------


def _states():
    anomalous = make_result()
    healthy = make_result(anomalous=False)
    unreadable = make_result(anomalous=False, skipped=["checkpoint-7"])
    inconclusive = make_result(anomalous=False)
    inconclusive.summary["verdict"].update(
        fault_type="inconclusive", reason="not enough evidence: 2 checkpoints"
    )
    no_verdict = make_result(anomalous=False)
    del no_verdict.summary["verdict"]
    return {
        "anomalous": anomalous,
        "healthy": healthy,
        "healthy, unreadable": unreadable,
        "inconclusive": inconclusive,
        "no verdict": no_verdict,
    }


@pytest.mark.parametrize("name", list(_states()))
def test_every_output_states_the_same_headline(name):
    res = _states()[name]
    o = data.outcome(res.summary)
    assert o.state == name.split(",")[0]
    terminal = render_terminal(res, quiet=True).strip()
    assert terminal == o.headline == f"{o.state.upper()}: {o.text}"
    page = render_html(res)
    tag = re.search(
        r'<div class="verdict (\w+)" data-state="([^"]+)">'
        r'<span class="tag">([^<]+)</span> ([^<]*)</div>',
        page,
    )
    assert tag and tag.group(2) == o.state and f"{tag.group(3)}: {tag.group(4)}" == terminal
    _, cases = _cases(junit_tree(res))
    problem = (
        cases["verdict"].find("failure")
        if cases["verdict"].find("failure") is not None
        else cases["verdict"].find("error")
    )
    assert cases["verdict"].find("system-out").text == f"{o.state}: {o.text}"
    assert (problem is None) == (o.state == "healthy")  # only a healthy verdict passes
    ann = github_annotations(res)[0]
    assert _gh_unescape(ann.split("::", 2)[2]).splitlines()[0] == f"{o.state}: {o.text}"
    assert ann.startswith(
        {"anomalous": "::error", "inconclusive": "::warning", "healthy": "::notice", "no verdict": "::error"}[
            o.state
        ]
        + f" title=ckptscan%3A {o.state}::"
    )
    md = step_summary_markdown(res).splitlines()
    mark = {
        "anomalous": "❌",
        "inconclusive": "⚠️",
        "no verdict": "⛔",
        "healthy": "⚠️" if o.unreadable_inputs else "✅",
    }[o.state]
    assert md[0] == f"## ckptscan: {mark} {o.state}"
    assert md[2] == f"**{o.state}: {o.text}**"
    assert (
        res.exit_code("anomaly")
        == {"anomalous": 1, "inconclusive": 5, "no verdict": 5, "healthy": 3 if o.unreadable_inputs else 0}[
            o.state
        ]
    )


def test_summary_json_carries_the_outcome(tiny_run, tmp_path):
    _, bad = tiny_run
    r = CliRunner().invoke(main, ["analyze", str(bad), "-o", str(tmp_path / "b"), "--json"])
    s = json.loads(r.stdout)
    assert s["outcome"] == data.outcome(s).as_dict() and s["outcome"]["unreadable_inputs"] == 1
    assert validate(s) == [] and s["started_at"].endswith("Z")


def test_junit_suites_of_two_runs_differ_and_carry_time_and_timestamp():
    a, b = make_result(run="/runs/a/run"), make_result(run="/runs/b/run")
    a.summary["started_at"] = "2025-01-02T03:04:05Z"
    (sa, ca), (sb, cb) = _cases(junit_tree(a)), _cases(junit_tree(b))
    assert sa.get("name") == "ckptscan /runs/a/run" != sb.get("name")
    assert ca["verdict"].get("classname") == "ckptscan.a.run" != cb["verdict"].get("classname")
    assert ca["attention"].get("classname") == "ckptscan.a.run.monitors"
    assert sa.get("time") == "1.500" and ca["verdict"].get("time") == "1.500"
    assert sa.get("timestamp") == "2025-01-02T03:04:05" and sb.get("timestamp") is None


# --- terminal: width, colours, markers ------------------------------------------------------------------


@pytest.mark.parametrize("columns, width", [(80, 80), (120, 100), (200, 100)])
def test_console_never_wider_than_100_columns(monkeypatch, columns, width):
    from ckptscan import cli

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(
        cli.shutil, "get_terminal_size", lambda fallback=None: os.terminal_size((columns, 40))
    )
    assert cli._console().width == width
    out = render_terminal(make_result(n=300), width=width)
    assert max(len(x) for x in out.splitlines()) <= width


def _coloured_rows(res) -> dict[str, list[str]]:
    """Strip rows of the first monitor, each cell as the colour it is drawn in ('' = default)."""
    buf = io.StringIO()
    console = Console(file=buf, width=100, force_terminal=True, color_system="standard", highlight=False)
    print_result(res, console)
    rows, colour = {}, ""
    for line in buf.getvalue().splitlines():
        plain = re.sub(r"\x1b\[[0-9;]*m", "", line)
        if not re.match(r"L\d+\*? ", plain) or plain.split()[0] in rows:
            continue
        cells = []
        for code, text in re.findall(r"(\x1b\[[0-9;]*m)?([^\x1b]*)", line):
            if code:
                last = code.strip("\x1b[m").split(";")
                colour = "dim" if "2" in last else {"31": "red", "33": "yellow"}.get(last[-1], "")
            cells += [colour] * len(text)
        rows[plain.split()[0]] = cells[6 : 6 + 60]
    return rows


def test_strip_red_from_each_layers_own_first_alarm():
    """Layer 0 alarms at step 300, layer 1 at step 500: a monitor-wide entry naming both layers
    must not paint layer 1 red from step 300."""
    res = make_result(n=60, layers=2)
    res.summary["verdict"]["evidence"] = [
        {"monitor": "attn.D2.entropy2", "layer": 0, "head": 1, "first_alarm_step": 300, "score": 9.0},
        {"monitor": "attn.D2.entropy2", "layer": 1, "head": 2, "first_alarm_step": 500, "score": 9.0},
    ]
    res.summary["alarms"] = [{"monitor": "attn.D2.entropy2", "first_alarm_step": 300, "layers": [0, 1]}]
    rows = _coloured_rows(res)
    # steps 10, 20, ...: step 300 is column 29
    assert rows["L0"].index("red") == 29 and rows["L1"].index("red") == 49
    assert data.first_alarm_by_layer(res.summary, "attn.D2.entropy2") == {0: 300, 1: 500}
    res.summary["verdict"]["evidence"] = res.summary["verdict"]["evidence"][:1]
    # layer 1's own step is not known any more: not coloured
    assert data.first_alarm_by_layer(res.summary, "attn.D2.entropy2") == {0: 300}
    res.summary["alarms"][0]["first_alarm_by_layer"] = {"0": 300, "1": 450}
    assert data.first_alarm_by_layer(res.summary, "attn.D2.entropy2") == {0: 300, 1: 450}


def test_strips_dim_what_was_not_examined_and_say_blocks_are_not_alarms():
    """A strip full of tall blocks on a run that raised no alarm read as a contradiction to a
    newcomer: the blocks before the first examined step (and on a layer that never settled) could
    not raise one.  They are drawn dim, ``E`` marks the first examined step, ``*`` a layer never
    examined, and the legend says that a block is not an alarm.  A result without coverage is
    drawn as before (nothing dim)."""
    res = make_result(n=60, layers=2)
    res.summary["verdict"]["evidence"] = [
        {"monitor": "attn.D2.entropy2", "layer": 0, "head": 1, "first_alarm_step": 300, "score": 9.0},
    ]
    res.summary["alarms"] = [{"monitor": "attn.D2.entropy2", "first_alarm_step": 300, "layers": [0]}]
    res.summary["detection"] = {
        "persist": 3,
        "coverage": {"first_examined_step": 200, "settled_step": 150, "layers_not_examined": [1]},
    }
    rows = _coloured_rows(res)
    buf = io.StringIO()
    print_result(
        res, Console(file=buf, width=100, force_terminal=True, color_system="standard", highlight=False)
    )
    assert set(rows) == {"L0", "L1*"}, rows.keys()  # layer 1 never examined: starred
    l0 = rows["L0"]  # steps 10, 20, ...: step 200 is column 19, the alarm at step 300 column 29
    assert set(l0[:19]) == {"dim"} and "dim" not in l0[19:], l0
    assert l0.index("red") == 29
    assert set(rows["L1*"]) == {"dim"}
    text = " ".join(buf.getvalue().split())
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert "E first examined at step 200" in text and "A block is not an alarm" in text
    assert "3 points in a row" in text
    marker_lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln) for ln in buf.getvalue().splitlines()]
    under = [ln for ln in marker_lines if ln.strip() and set(ln.strip()) <= set("^DLE ")]
    assert any(len(ln) > 25 and ln[25] == "E" for ln in under), under  # under step 200 (column 19)
    # a whole-model rule can alarm before E (it reads each layer from its own settling): red wins
    res.summary["detection"]["coverage"]["first_examined_step"] = 400
    l0 = _coloured_rows(res)["L0"]
    assert l0.index("red") == 29 and "dim" not in l0[29:] and set(l0[:29]) == {"dim"}, l0
    # a step that is no number says nothing: nothing dimmed (every cell was dimmed)
    res.summary["detection"]["coverage"]["first_examined_step"] = "abc"
    assert "dim" not in _coloured_rows(res)["L0"]
    del res.summary["detection"]
    assert "dim" not in _coloured_rows(res)["L0"]
    assert "A block is not an alarm" not in render_terminal(res, width=400)  # nothing it describes is drawn
    res.summary["detection"] = "not an object"  # a hand-edited summary: the reports still render
    assert "HEALTHY" in render_terminal(res, width=400) or "ANOMALOUS" in render_terminal(res, width=400)
    assert "<html" in render_html(res)


def test_a_verdict_dated_at_the_divergence_has_no_lead_of_zero():
    """``unknown/loss-diverged`` is dated at the divergence itself: its lead time of 0 steps is not
    a monitor that fired just in time, and the reports say so; other verdicts print the number."""
    res = make_result()
    lead = res.summary["lead_time_steps"]
    assert data.lead_text(res.summary, " steps") == f"{lead} steps"
    assert f"lead time {lead} steps" in " ".join(render_terminal(res, width=400).split())
    res.summary["verdict"].update(decision="unknown/loss-diverged", fault_type="unknown", confidence=0.0)
    res.summary["lead_time_steps"] = 0
    words = "0 steps (dated at the divergence: the monitors did not read the fault before it)"
    assert data.lead_text(res.summary, " steps") == words  # no coverage recorded: not "nothing examined"
    out = " ".join(render_terminal(res, width=400).split())
    assert f"lead time {words}" in out
    # its confidence of 0 is about the class: the headline does not print it as doubt about the run
    assert "unknown (the loss diverged; no monitor named a cause)" in out and "confidence 0.00" not in out
    assert "dated at the divergence" in step_summary_markdown(res)
    assert "dated at the divergence" in render_html(res)
    div = res.summary["loss"]["divergence_step"]
    res.summary["detection"] = {"coverage": {"first_examined_step": div + 50}}
    assert data.lead_text(res.summary) == "0 (dated at the divergence: nothing before it was examined)"
    res.summary["detection"] = {"coverage": {"first_examined_step": div - 50}}
    assert data.lead_text(res.summary).endswith("the monitors did not read the fault before it)")
    res.summary["lead_time_steps"] = None
    assert data.lead_text(res.summary) == "-"


def test_the_evidence_tables_say_what_a_score_is():
    """The score column mixes units (a z for most rows; a factor, a fall or an entropy drop where
    the monitor says so): both evidence tables say which, under the table."""
    res = make_result()
    assert "score: a robust z (standard deviations" in " ".join(render_terminal(res, width=100).split())
    assert "score: a robust z (standard deviations" in render_html(res)
    assert "own recent baseline" in render_html(res)
    res.summary["detection"] = {"baseline": REFERENCE_BASELINE}  # what the judgement writes
    assert "from the reference run at the same step" in " ".join(render_terminal(res, width=100).split())
    assert "from the reference run at the same step" in render_html(res)


def test_a_verdict_read_against_a_reference_run_says_how_much_history_they_share():
    """With ``--baseline`` the terminal and HTML reports name the reference run and say until which
    step it held this run's weights; a reference that shares none (another seed) is flagged, since
    that reading was found to cry wolf, unless it was read for the step size alone; a run judged
    against itself says nothing of a baseline."""
    res = make_result()
    assert "baseline:" not in render_terminal(res, width=400) and data.reference_text(res.summary) is None
    res.summary["detection"] = {
        "baseline": REFERENCE_BASELINE,
        "reference_run": "/runs/healthy",
        "reference_shared_until": 300,
    }
    text = " ".join(render_terminal(res, width=400).split())
    said = "judged against the reference run /runs/healthy (--baseline)"
    assert (
        f"baseline: {said}, read for every series; their weights matched at every common checkpoint up to step 300"
        in text
    )
    assert "matched at every common checkpoint up to step 300" in render_html(res)
    res.summary["detection"]["reference_shared_until"] = None
    text = " ".join(render_terminal(res, width=400).split())
    assert "matched this run's at none of their common checkpoints" in text
    assert "read the verdict without --baseline too" in text
    assert "<p>baseline: " in render_html(res)  # not fine print
    assert data.outcome(res.summary).text.endswith(
        "; read against a --baseline run whose weights matched at no checkpoint"
    )
    res.summary["detection"]["reference_shared_until"] = 300
    assert "--baseline" not in data.outcome(res.summary).text  # the headline, -q and JUnit carry it only then
    res.summary["detection"].update(reference_shared_until=None, reference_scope=REFERENCE_STEPS)
    text = " ".join(render_terminal(res, width=400).split())  # another seed: read for the step size alone
    assert f"baseline: {said}, for the step size alone: their weights matched at none" in text
    assert (
        "read the verdict without --baseline too" not in text
        and "--baseline" not in data.outcome(res.summary).text
    )
    assert "for the step sizes (q, k, router update ratios); the series' own recent baseline" in text
    res.summary["detection"].update(reference_scope=REFERENCE_NONE, reference_steps_held=[5, 15])  # too few
    text = " ".join(render_terminal(res, width=400).split())
    assert (
        f"baseline: {said}, which could be read at none of this run's points (it holds 5 of this run's 15"
        in text
    )
    assert data.outcome(res.summary).text.endswith(
        "; the --baseline run could be read at none of its points: judged on its own history"
    )
    res.summary["detection"].update(
        reference_scope="all", reference_shared_until=1500, reference_identical=True
    )
    text = " ".join(render_terminal(res, width=400).split())  # a copy of the run
    assert f"baseline: {said}; their weights match at every checkpoint of this run: nothing differs" in text
    assert data.outcome(res.summary).text.endswith(
        "; the --baseline run's weights match this run's at every checkpoint"
    )
    del res.summary["detection"]["reference_shared_until"]  # a summary written before the field
    assert data.reference_text(res.summary) == "judged against the reference run /runs/healthy (--baseline)"


def test_alarms_set_aside_are_shown_on_an_anomalous_run_too():
    """The asleep rule's set-aside alarms were in the reason of a verdict without alarms only; on an
    anomalous run they were in summary.json alone.  The terminal and HTML reports show them there
    too (a layer that never learned is worth knowing about); a run without them shows nothing."""
    res = make_result()
    assert "set aside:" not in render_terminal(res, width=400)
    res.summary["detection"] = {
        "coverage": {
            "first_examined_step": 20,
            "dormant_alarms": {
                "alarms": 3,
                "layers": [1],
                "first_step": 630,
                "monitors": ["attn.D2.entropy2"],
                "dormant_ratio": 0.05,
            },
        }
    }
    line = (
        "set aside: 3 alarm(s) (attn.D2.entropy2) on layer(s) [1] from step 630, where the layer (or the "
        "alarm's head) stood under 0.05"
    )
    assert line in " ".join(render_terminal(res, width=400).split())
    assert "set aside: 3 alarm(s) (attn.D2.entropy2) on layer(s) [1] from step 630" in render_html(res)
    res.summary["verdict"].update(decision="unknown/loss-diverged", fault_type="unknown", evidence=[])
    assert data.set_aside_note(res.summary) is None  # its reason says it: not twice
    assert "set aside:" not in render_terminal(res, width=400)
    res.summary["verdict"].update(anomalous=False, fault_type="healthy", decision="healthy")
    assert data.set_aside_note(res.summary) is None


def test_an_alarm_at_the_first_step_examined_may_have_begun_earlier():
    """An earliest anomalous step equal to the first step examined is where the tests began, not
    necessarily where the fault did: the headline says so (a drill's fault at step 400 read
    'earliest anomalous step 700', the run's first examined step)."""
    res = make_result()
    first = res.summary["verdict"]["earliest_step"]
    assert "may have begun earlier" not in data.outcome(res.summary).text
    res.summary["detection"] = {"coverage": {"first_examined_step": first}}
    assert data.outcome(res.summary).text.endswith(
        f"earliest anomalous step {first} (the first step examined: it may have begun earlier)"
    )
    res.summary["detection"] = {"coverage": {"first_examined_step": first - 10}}
    assert "may have begun earlier" not in data.outcome(res.summary).text


def test_a_score_that_is_no_z_carries_its_unit():
    """One score column holds z-scores, factors and entropy drops: a slow fall's 0.131 read as the
    weakest row next to z's of 10.  Each non-z score carries its sign of unit."""
    assert data.score_text({"score": 13.41, "test": "level"}) == "13.4"
    assert data.score_text({"score": 1.754, "test": "jump"}) == "x1.75"
    assert data.score_text({"score": 1.6, "test": "rise"}) == "x1.6"
    assert data.score_text({"score": 1.9, "test": "lift"}) == "x1.9"
    assert data.score_text({"score": 29.5, "test": "depth"}) == "/29.5"
    assert data.score_text({"score": 0.1834, "test": "fall"}) == "-0.183"
    assert data.score_text({"score": None}) == "-" and data.score_text({"score": "n/a"}) == "n/a"
    res = make_result()
    res.summary["verdict"]["evidence"][0].update(test="fall", score=0.1834)
    assert "-0.183" in render_terminal(res, width=100) and "-0.183" in render_html(res)


def test_strip_legend_names_the_colours_and_every_marker():
    from ckptscan.report.terminal import marker_rows

    out = render_terminal(make_result(n=300))
    assert "red: from the layer's first alarm on, yellow: >= 5 with no alarm (yet)" in " ".join(out.split())
    xs = np.array([0, 100, 200, 300])
    marks = {"earliest_step": 110, "divergence_step": 350, "log_only_alarm_step": 150}
    assert marker_rows(xs, 399, marks) == [" ^ D", " L"]  # L shares ^'s column: a row of its own, not hidden
    assert (
        marker_rows(
            xs, 399, {**marks, "earliest_step": None, "divergence_step": 999, "log_only_alarm_step": None}
        )
        == []
    )
    res = make_result(n=300)
    res.summary["loss"]["log_only_alarm_step"] = res.summary["verdict"]["earliest_step"] + 1
    lines = render_terminal(res).splitlines()
    assert any(ln.strip() == "L" for ln in lines)
    assert any("L log-only alarm at step 1531" in ln for ln in lines)


def test_eval_table_fits_100_columns():
    from ckptscan.drills import evaluate

    t = {"fault": "lowprec-attention", "onset_step": 400, "divergence_step": 1000}
    rows = [
        dict(
            evaluate.score_run(
                t,
                {
                    "verdict": {
                        "anomalous": True,
                        "earliest_step": 500,
                        "fault_type": "lowprec_attention",
                        "evidence": [],
                    },
                    "loss": {"log_only_alarm_step": 900},
                },
            ),
            run=f"lowprec-moe-seed{i}",
        )
        for i in range(3)
    ]
    text = evaluate.format_table(rows)
    assert max(len(x) for x in text.splitlines()) <= 100
    assert text.count("\nrun ") + text.startswith("run ") >= 2  # the columns that do not fit: a second table
    for _key, head in evaluate.COLUMNS:
        assert head in text, head


def test_report_command_draws_another_stored_result_beside(tmp_path):
    out = store(make_result(), tmp_path / "out")
    base = store(make_result(anomalous=False, run="/runs/healthy"), tmp_path / "base")
    html = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["report", str(out), "--html", str(html), "--baseline", str(base), "-q"])
    assert r.exit_code == 0, r.output
    payload = _split_html(html.read_text())[2]
    assert payload["baseline"]["label"] == "/runs/healthy" and payload["baseline"]["monitors"]
