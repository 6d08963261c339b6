"""A monitor family defined and registered in this file alone flows through the whole pipeline:
the analysis loop computes it, timeline.h5 stores it, the detector scores it (its scores are stored
beside the monitors), and the JSON, terminal and HTML reports show it.  Nothing outside this file
knows about it (CONTRIBUTING.md, "Add a monitor family": one file)."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest
import torch

from ckptscan import analyze
from ckptscan.monitors import (
    REGISTRY,
    BlockStep,
    Detector,
    Family,
    Role,
    register_family,
    series,
    unregister_family,
)
from ckptscan.report.html import render_html
from ckptscan.report.terminal import print_result

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "drills", "healthy-dense")


def _q_fro(step: BlockStep) -> dict[str, torch.Tensor]:
    """||Wq_j||_F per query head, from one checkpoint."""
    (wq,) = step.now
    return {"q_fro": wq.double().flatten(1).norm(dim=1)}


def _q_step(step: BlockStep) -> dict[str, torch.Tensor]:
    """||Wq(t) - Wq(t-1)||_F per query head, from a checkpoint and the previous one."""
    return {"q_step": (step.now[0].double() - step.before[0].double()).flatten(1).norm(dim=1)}


def _heads(layout, prefix: str) -> int:
    return max(b.n_heads for b in layout.attention if b.name == "attn")


TOY = Family(
    name="toy",
    blocks=lambda layout: [b for b in layout.attention if b.name == "attn"],
    load=lambda block, read: block.load(read)[:1],  # the query weights [H, h, d] only
    prefix=lambda block: "toy",
    single=_q_fro,
    pair=_q_step,
    columns=_heads,
    series=series(
        "toy",
        "head",
        "toy",
        [
            ("q_fro", "single", "up", "||Wq_j||_F per query head"),
            ("q_step", "pair", "up", "||dWq_j||_F per query head"),
        ],
    ),
    detectors=(Detector("toy.q_step", "rate", True, False, 0.05, Role.OTHER),),
    leading=("toy.q_fro",),
)


@pytest.fixture
def toy_family():
    register_family(TOY)
    try:
        yield TOY
    finally:
        unregister_family(TOY.name)


def test_a_family_registered_here_reaches_the_timeline_detection_and_every_report(toy_family, tmp_path):
    res = analyze(FIXTURE, out_dir=tmp_path / "out", device="cpu", command=["test"])
    # the analysis loop computed it, per layer and head, for every checkpoint
    q = res.timeline.get("toy.q_fro")
    n_layers, n_heads = q.shape[1], q.shape[2]
    assert n_heads > 1 and np.isfinite(q).all()
    step = res.timeline.get("toy.q_step")
    assert np.isnan(step[0]).all() and np.isfinite(step[1:]).all()  # a pair: undefined at the first
    # ... as the family defines it (checked against the weights themselves at the last checkpoint)
    from safetensors.torch import load_file

    last = max(res.summary["checkpoints"]["steps"])
    weights = load_file(os.path.join(FIXTURE, f"checkpoint-{last}", "model.safetensors"))
    wq0 = next(v for k, v in weights.items() if k.endswith("layers.0.self_attn.q_proj.weight")).double()
    per_head = wq0.reshape(n_heads, -1, wq0.shape[-1]).flatten(1).norm(dim=1).numpy()
    np.testing.assert_allclose(q[-1, 0], per_head, rtol=1e-4)

    # timeline.h5 stores the series, and the detector's scores of its watched series
    with h5py.File(tmp_path / "out" / "timeline.h5") as f:
        assert "toy.q_fro" in f["monitors"] and "toy.q_step" in f["monitors"]
        scores = f["scores"]["toy.q_step"][()]
    assert scores.shape == (len(res.timeline.steps), n_layers) and np.isfinite(scores).any()
    assert "toy.q_fro" not in res.timeline.scores  # no detector watches it

    # the JSON summary, the terminal and the HTML report show it
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {"toy.q_fro", "toy.q_step"} <= set(summary["monitors"])
    from rich.console import Console

    console = Console(record=True, width=120, force_terminal=False)
    print_result(res, console)
    assert "toy.q_fro" in console.export_text()
    html = render_html(res)
    assert "toy.q_fro" in html and "toy.q_step" in html and "||Wq_j||_F per query head" in html


def test_the_family_is_gone_once_unregistered(toy_family):
    assert "toy.q_fro" in REGISTRY
    unregister_family(TOY.name)
    assert "toy.q_fro" not in REGISTRY
    register_family(TOY)  # the fixture unregisters it again


def test_a_family_with_a_detector_of_a_series_it_does_not_register_is_refused():
    bad = Family(
        name="bad",
        blocks=lambda layout: [],
        load=lambda b, read: (),
        single=lambda s: {},
        series=series("bad", "layer", "bad", [("x", "single", "up", "")]),
        detectors=(Detector("bad.y", "level", False, False, 0.1, Role.OTHER),),
    )
    with pytest.raises(ValueError, match="not a series of family"):
        register_family(bad)
    assert "bad.x" not in REGISTRY


def test_parts_stored_before_a_family_was_registered_are_computed_again(tmp_path):
    out = tmp_path / "out"
    first = analyze(FIXTURE, out_dir=out, device="cpu", steps=":300", command=["test"])
    assert first.summary["checkpoints"]["reused"] == 0 and "toy.q_fro" not in first.timeline
    register_family(TOY)
    try:
        again = analyze(FIXTURE, out_dir=out, device="cpu", steps=":300", command=["test"])
    finally:
        unregister_family(TOY.name)
    assert again.summary["checkpoints"]["reused"] == 0
    assert np.isfinite(again.timeline.get("toy.q_fro")).all()
    third = analyze(FIXTURE, out_dir=out, device="cpu", steps=":300", command=["test"])  # without it: reused
    assert third.summary["checkpoints"]["reused"] == len(third.summary["checkpoints"]["steps"])
