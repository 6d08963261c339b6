"""``ckptscan eval``: scoring rows against truth, the table, and (if present) the fixture runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckptscan import evaluate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "drills"


def summary(anomalous, earliest, fault, log_alarm=None):
    return {"verdict": {"anomalous": anomalous, "earliest_step": earliest, "fault_type": fault, "confidence": 0.5},
            "loss": {"log_only_alarm_step": log_alarm}}


def test_truth_mapping():
    assert evaluate.truth_class({"fault": "lowprec-attention"}) == "lowprec_attention"
    assert evaluate.truth_class({"fault": "high-lr"}) == "high_lr"
    assert evaluate.truth_class({"fault": "none", "benign": "warmup-cut"}) == "healthy"


def test_score_fault_detected_in_time():
    t = {"fault": "high-lr", "onset_step": 400, "divergence_step": 1000}
    r = evaluate.score_run(t, summary(True, 500, "high_lr", log_alarm=900))
    assert r["detected"] and not r["false_alarm"] and r["class_right"]
    assert r["lead_time"] == 500 and r["log_only_lead_time"] == 100 and r["beats_log_only"]
    assert r["after_onset"] == 100 and not r["log_only_cried_wolf"]


def test_score_early_alarm_is_false_alarm_and_late_is_missed():
    t = {"fault": "lowprec-attention", "onset_step": 400, "divergence_step": 1000}
    r = evaluate.score_run(t, summary(True, 300, "lowprec_attention", log_alarm=200))
    assert r["false_alarm"] and not r["detected"] and r["log_only_cried_wolf"]
    r = evaluate.score_run(t, summary(True, 1100, "lowprec_attention"))
    assert not r["detected"] and not r["false_alarm"] and r["lead_time"] is None
    r = evaluate.score_run(t, summary(False, None, "healthy"))
    assert not r["detected"] and not r["class_right"]


def test_score_healthy():
    t = {"fault": "none", "onset_step": 400, "divergence_step": None, "benign": "data-switch"}
    r = evaluate.score_run(t, summary(False, None, "healthy", log_alarm=600))
    assert r["false_alarm"] is False and r["class_right"] and r["log_only_cried_wolf"] and r["detected"] is None
    r = evaluate.score_run(t, summary(True, 800, "high_lr"))
    assert r["false_alarm"]


def test_table_and_totals():
    t = {"fault": "high-lr", "onset_step": 400, "divergence_step": 1000}
    rows = [dict(evaluate.score_run(t, summary(True, 500, "high_lr")), run="a"),
            dict(evaluate.score_run({"fault": "none"}, summary(False, None, "healthy")), run="b")]
    txt = evaluate.format_table(rows)
    assert txt.splitlines()[2].startswith("a ") and "detected 1/1" in txt and "false alarms 0/2" in txt


def test_eval_cmd_empty_dir(tmp_path):
    res = CliRunner().invoke(evaluate.eval_cmd, [str(tmp_path)])
    assert res.exit_code != 0 and "truth.json" in str(res.exception or res.output)


FIXTURE_RUNS = sorted(p for p in FIXTURES.glob("*") if (p / "truth.json").is_file()) if FIXTURES.is_dir() else []


# Known misses at the time of writing (see docs/detection.md, "Known limits"): the combined-moe
# fixture diverges at step 568, 168 steps after onset, with checkpoints every 125 steps: only one
# checkpoint lies between onset and divergence, so no 3-checkpoint alarm can precede it.
KNOWN_MISS = {"combined-moe"}


def _params(runs):
    return [pytest.param(p, marks=pytest.mark.xfail(reason="see KNOWN_MISS", strict=False))
            if p.name in KNOWN_MISS else p for p in runs]


@pytest.fixture(scope="module")
def fixture_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("eval")
    return {r["run"]: r for r in evaluate.evaluate(FIXTURES, out_root=out, device="cpu")}


@pytest.mark.skipif(not FIXTURE_RUNS, reason="no drill fixtures")
@pytest.mark.parametrize("run", _params(FIXTURE_RUNS), ids=lambda p: p.name)
def test_fixture_run_end_to_end(run, fixture_rows):
    """Every committed drill: fault found after onset, before divergence, right class; healthy quiet."""
    r = fixture_rows[run.name]
    json.dumps(r, allow_nan=False)
    assert not r["false_alarm"], r
    assert r["class_right"], r
    if r["truth"] != "healthy":
        assert r["detected"], r
        if r["divergence"] is not None:
            assert r["lead_time"] > 0, r


@pytest.mark.skipif(not FIXTURE_RUNS, reason="no drill fixtures")
@pytest.mark.xfail(reason="the log-only rule fires on a grad-norm blip at step 516 on highlr-moe (it cries wolf "
                   "on healthy runs too); ckptscan's 3-checkpoint confirmation at 125-step saves lands at 625",
                   strict=False)
def test_fixture_lead_beats_log_only(fixture_rows):
    for r in fixture_rows.values():
        if r["truth"] != "healthy" and r["divergence"] is not None and r["run"] not in KNOWN_MISS:
            assert r["beats_log_only"], r
