"""``ckptscan eval``: scoring rows against truth, the table, and (if present) the fixture runs."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckptscan.drills import evaluate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "drills"


def summary(anomalous, earliest, fault, log_alarm=None, log_steps=None):
    loss = {"log_only_alarm_step": log_alarm}
    if log_steps is not None:
        loss = {"log_only_alarm_step": log_steps[0] if log_steps else None, "log_only_alarm_steps": log_steps}
    return {
        "verdict": {
            "anomalous": anomalous,
            "earliest_step": earliest,
            "fault_type": fault,
            "confidence": 0.5,
            "confirmed_step": None if earliest is None else earliest + 200,
        },
        "loss": loss,
    }


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


def test_checkpoints_in_window_counts_what_could_detect_the_fault_in_time():
    """A fault run's checkpoints analysed at/after its onset and before its divergence: with none,
    no reading of the checkpoints finds it in time; the totals count those runs apart."""
    t = {"fault": "high-lr", "onset_step": 407, "divergence_step": 468}
    late = summary(True, 500, "high_lr")
    late["checkpoints"] = {"steps": [100, 200, 300, 400, 500, 600]}
    r = evaluate.score_run(t, late)
    assert r["checkpoints_in_window"] == 0 and not r["detected"]
    r2 = evaluate.score_run({**t, "divergence_step": 620}, late)
    assert r2["checkpoints_in_window"] == 2 and r2["detected"]
    r3 = evaluate.score_run({**t, "divergence_step": None}, late)
    assert r3["checkpoints_in_window"] == 2
    unknown = evaluate.score_run(t, summary(True, 500, "high_lr"))  # the checkpoints' steps unknown
    assert unknown["checkpoints_in_window"] is None
    healthy = evaluate.score_run({"fault": "none"}, late)
    assert healthy["checkpoints_in_window"] is None
    error = {"run": "d", "truth": "high_lr", "verdict": "error", "class_right": False, "false_alarm": False}
    error.update(detected=False, divergence=None, onset=407)
    rows = [{**r, "run": "a"}, {**r2, "run": "b"}, {**healthy, "run": "c"}, error]
    tot = evaluate.totals(rows)
    assert (tot["detectable"], tot["detected_of_detectable"], tot["detected"]) == (1, 1, 1)
    assert tot["window_unknown"] == 1  # the error row: neither detectable nor not
    assert r2["examined_in_window"] is None  # nothing says what was examined


def test_examined_in_window_counts_the_checkpoints_the_per_series_tests_read_in_time():
    """Of a fault run's checkpoints between onset and divergence, those at/after the first examined
    step (``detection.coverage.first_examined_step``): a fault whose window closed before the run
    was examined can only be found by the step-size jump rule."""
    t = {"fault": "high-lr", "onset_step": 407, "divergence_step": 620}
    s = summary(True, 500, "high_lr")
    s["checkpoints"] = {"steps": [100, 200, 300, 400, 500, 600]}
    s["detection"] = {"coverage": {"first_examined_step": 600}}
    r = evaluate.score_run(t, s)
    assert (r["checkpoints_in_window"], r["examined_in_window"]) == (2, 1)
    s["detection"]["coverage"]["first_examined_step"] = 700
    late = evaluate.score_run(t, s)
    assert (late["checkpoints_in_window"], late["examined_in_window"]) == (2, 0) and late["detected"]
    s["detection"]["coverage"]["first_examined_step"] = None  # nothing examined
    assert evaluate.score_run(t, s)["examined_in_window"] == 0
    tot = evaluate.totals([{**r, "run": "a"}, {**late, "run": "b"}])
    assert (tot["detectable"], tot["examined_in_window"], tot["detected_of_examined"]) == (2, 1, 1)


def test_log_only_credited_with_first_alarm_after_onset():
    """A pre-onset alarm is crying wolf; the lead counts from the first alarm at/after the onset
    (log lead), while the stricter first-alarm-only reading gives it none (log lead (1st))."""
    t = {"fault": "high-lr", "onset_step": 400, "divergence_step": 1000}
    r = evaluate.score_run(t, summary(True, 600, "high_lr", log_steps=[117, 350, 615, 990]))
    assert r["log_only_cried_wolf"] and r["log_only_alarm"] == 615
    assert r["log_only_lead_time"] == 385 and r["log_only_first_lead_time"] is None
    assert r["lead_time"] == 400 and r["beats_log_only"] and r["beats_log_only_first"]
    assert r["confirmed_step"] == 800 and r["confirmed_before_divergence"]
    r = evaluate.score_run(t, summary(True, 700, "high_lr", log_steps=[117, 615]))
    assert not r["beats_log_only"] and r["beats_log_only_first"]
    r = evaluate.score_run(t, summary(True, 600, "high_lr", log_steps=[1000]))  # at divergence: too late
    assert r["log_only_lead_time"] is None and r["beats_log_only"]


def test_specific_log_alarm_discounts_healthy_twin_blips():
    t = {"fault": "high-lr", "onset_step": 400, "divergence_step": 1000}
    row = evaluate.score_run(t, summary(True, 700, "high_lr", log_steps=[615, 802]))
    assert not row["beats_log_only"]  # the 615 blip counts as a detection here
    r = evaluate.specific_log_alarm(dict(row), [615, 802], [[117, 612]])
    assert r["log_only_specific_alarm"] == 802 and r["log_only_specific_lead_time"] == 198
    assert r["beats_log_only_specific"] and r["log_only_twins"] == 1
    r = evaluate.specific_log_alarm(dict(row), [615, 802], [[117, 612], [801]])
    assert r["log_only_specific_alarm"] is None and r["beats_log_only_specific"]
    r = evaluate.specific_log_alarm(dict(row), [615, 802], [])  # no twin: no specific answer
    assert r["beats_log_only_specific"] is None and r["log_only_specific_alarm"] is None


def test_recipe_key_is_the_batch_order_not_the_schedule():
    base = {
        "seed": 0,
        "steps_planned": 1500,
        "data": {"fingerprint": "x"},
        "fault": "none",
        "params": {
            "naming": "mixtral",
            "seq_len": 64,
            "batch_size": 8,
            "lr": 3e-3,
            "warmup": 100,
            "save_every": 100,
            "replay": True,
            "dtype": "bfloat16",
        },
    }
    other = json.loads(json.dumps(base))
    other["params"].update(save_every=125, replay=False, dtype="float32", warmup=800)
    other.update(fault="combined", onset_step=500)
    assert evaluate.recipe_key(base) == evaluate.recipe_key(other)
    assert evaluate.recipe_key(base) != evaluate.recipe_key(dict(base, seed=1))
    third = json.loads(json.dumps(base))
    third["params"]["batch_size"] = 4
    assert evaluate.recipe_key(base) != evaluate.recipe_key(third)
    assert evaluate.is_fault_free(base) and evaluate.is_fault_free(dict(base, benign="warmup-cut"))
    assert not evaluate.is_fault_free(other)


def test_score_healthy():
    t = {"fault": "none", "onset_step": 400, "divergence_step": None, "benign": "data-switch"}
    r = evaluate.score_run(t, summary(False, None, "healthy", log_alarm=600))
    assert (
        r["false_alarm"] is False and r["class_right"] and r["log_only_cried_wolf"] and r["detected"] is None
    )
    r = evaluate.score_run(t, summary(True, 800, "high_lr"))
    assert r["false_alarm"]


def test_table_and_totals():
    t = {"fault": "high-lr", "onset_step": 400, "divergence_step": 1000}
    rows = [
        dict(evaluate.score_run(t, summary(True, 500, "high_lr")), run="a"),
        dict(evaluate.score_run({"fault": "none"}, summary(False, None, "healthy")), run="b"),
    ]
    txt = evaluate.format_table(rows)
    assert txt.splitlines()[2].startswith("a ") and "detected 1/1" in txt and "false alarms 0/2" in txt


def test_eval_cmd_empty_dir(tmp_path):
    res = CliRunner().invoke(evaluate.eval_cmd, [str(tmp_path)])
    assert res.exit_code == 2 and res.stderr.startswith("ckptscan: error: ") and "truth.json" in res.stderr


FIXTURE_RUNS = (
    sorted(p for p in FIXTURES.glob("*") if (p / "truth.json").is_file()) if FIXTURES.is_dir() else []
)


def _checkpoints_in_window(run: Path) -> int | None:
    """Checkpoints saved after the onset and before the divergence (None: no divergence)."""
    t = json.loads((run / "truth.json").read_text())
    div, onset = t.get("divergence_step"), t.get("onset_step")
    if div is None or t.get("fault") in (None, "none"):
        return None
    steps = [int(re.findall(r"\d+", str(c))[-1]) for c in t.get("checkpoints", [])]
    return sum(1 for c in steps if onset <= c < div)


# A fault that diverges with fewer than 2 checkpoints between onset and divergence cannot show a
# weight-side alarm starting in that window that is confirmed at all (e.g. the first fixture set's
# combined-moe: saves every 125 steps, divergence 168 steps after onset).
KNOWN_MISS = {
    p.name
    for p in (sorted(FIXTURES.glob("*")) if FIXTURES.is_dir() else [])
    if (p / "truth.json").is_file() and (_checkpoints_in_window(p) or 99) < 2
}
# Fault runs where the log-only rule's first post-onset alarm is earlier than ours, documented in
# docs/detection.md ("Known limits"): the LR growth turns an ordinary grad-norm blip at step 516
# into a 6-sigma one, one checkpoint after onset; all three faults start at step 400, the
# checkpoint at which these runs leave their early phase, and a point is scored once two values
# after it are in its baseline, so the first scored point is 700 (saves every 100 steps).
KNOWN_LOG_ONLY_WINS = {"combined-moe", "highlr-moe", "lowprec-moe"}


def _params(runs):
    return [
        pytest.param(p, marks=pytest.mark.xfail(reason="see KNOWN_MISS", strict=True))
        if p.name in KNOWN_MISS
        else p
        for p in runs
    ]


@pytest.fixture(scope="module")
def fixture_eval(tmp_path_factory):
    """The analysis root and the rows of every committed drill."""
    out = tmp_path_factory.mktemp("eval")
    # weight side only: the verdict does not read act.* series, and replay doubles the time
    rows = evaluate.evaluate(FIXTURES, out_root=out, device="cpu", replay=False)
    return out, {r["run"]: r for r in rows}


@pytest.fixture(scope="module")
def fixture_rows(fixture_eval):
    return fixture_eval[1]


@pytest.mark.skipif(not FIXTURE_RUNS, reason="no drill fixtures")
def test_stored_judging_needs_no_weights(fixture_eval, tmp_path):
    """``stored``: the drills copied without a single weight file, judged from the stored results,
    give the rows their analysis gave; with no stored result, every run is an error row."""
    out, rows = fixture_eval
    bare = tmp_path / "bare"
    shutil.copytree(FIXTURES, bare, ignore=shutil.ignore_patterns("*.safetensors", "*.pt", "*.bin"))
    assert not [p for p in bare.rglob("*") if p.suffix in (".safetensors", ".pt", ".bin")]
    again = {r["run"]: r for r in evaluate.evaluate(bare, out_root=out, stored=True)}
    assert again == rows
    empty = tmp_path / "none"
    errors = evaluate.evaluate(bare, out_root=empty, stored=True)
    assert errors and all(r["verdict"] == "error" for r in errors)
    assert not empty.exists()  # nothing analysed, nothing written


@pytest.mark.skipif(not FIXTURE_RUNS, reason="no drill fixtures")
def test_stored_runs_judged_against_a_reference_run(fixture_eval):
    """``reference_for``: each MoE drill judged from its stored result against the healthy MoE
    drill (``--baseline``), the runs it gives no reference left out; the faults are found after
    their onset with the right class, the benign run stays quiet, and the judgement says which
    run it was read against and until which step that run held the same weights.  Without
    ``stored`` it is refused (nothing would be analysed twice)."""
    from ckptscan.api import load_result
    from ckptscan.judge.detect import Params
    from ckptscan.judge.verdict import Reference

    out, _ = fixture_eval
    ref = Reference(load_result(out / "healthy-moe").timeline, str(FIXTURES / "healthy-moe"))
    moe = {"benign-moe", "combined-moe", "highlr-moe", "lowprec-moe"}

    def reference_for(run, truth):
        return ref if run.name in moe else None

    rows = {
        r["run"]: r
        for r in evaluate.evaluate(FIXTURES, out_root=out, stored=True, reference_for=reference_for)
    }
    assert set(rows) == moe
    assert all(r["class_right"] and not r["false_alarm"] for r in rows.values()), rows
    assert all(rows[n]["detected"] for n in moe - {"benign-moe"}), rows
    judged = evaluate.rejudge(FIXTURES / "lowprec-moe", out / "lowprec-moe", Params(), ref)
    assert judged["detection"]["baseline"] == "reference-run"
    assert judged["detection"]["reference_run"] == str(FIXTURES / "healthy-moe")
    # the twin held the same weights until the save before its onset (400); the warm-up cut left it at once
    assert judged["detection"]["reference_shared_until"] == 300
    cut = evaluate.rejudge(FIXTURES / "benign-moe", out / "benign-moe", Params(), ref)
    assert cut["detection"]["reference_shared_until"] is None
    assert (
        evaluate.rejudge(FIXTURES / "lowprec-moe", out / "lowprec-moe", Params())["detection"]["baseline"]
        == "self"
    )
    with pytest.raises(ValueError, match="stored"):
        evaluate.evaluate(FIXTURES, out_root=out, reference_for=reference_for)


@pytest.mark.slow
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
def test_fixture_lead_beats_log_only(fixture_rows):
    """Lead time > the log-only detector's (first alarm at/after onset) on every diverging fault run
    except the documented ones, where ckptscan must still lead the divergence."""
    for r in fixture_rows.values():
        if r["truth"] == "healthy" or r["divergence"] is None or r["run"] in KNOWN_MISS:
            continue
        if r["run"] in KNOWN_LOG_ONLY_WINS:
            assert r["lead_time"] > 0, r
        else:
            assert r["beats_log_only"], r


@pytest.mark.parametrize(
    ("coverage", "phase"),
    [
        ({"settled_step": 500, "first_examined_step": 800}, "before the run settled"),
        ({"settled_step": 400, "first_examined_step": 700}, "settled, not yet examined"),
        ({"settled_step": 200, "first_examined_step": 407}, "examined"),
        ({"settled_step": None, "first_examined_step": None}, "not examined"),
        ({"settled_step": 300, "first_examined_step": None}, "not examined"),
        ({}, "unknown"),
    ],
)
def test_onset_phase_places_the_onset_in_the_runs_own_time_line(coverage, phase):
    """Where a fault's onset (step 407) fell: before the first layer settled, between the settling
    and the first examined step (the baseline), at or after it, or in a run never examined."""
    t = {"fault": "high-lr", "onset_step": 407, "divergence_step": 900}
    s = summary(True, 500, "high_lr")
    s["detection"] = {"coverage": coverage}
    assert evaluate.score_run(t, s)["onset_phase"] == phase
    assert phase in evaluate.ONSET_PHASES
    assert evaluate.score_run({"fault": "none"}, s)["onset_phase"] is None  # no fault, no onset
