"""Training-log reading, the divergence rule and the log-only spike rule."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptscan.judge import logs

# --- slow references -------------------------------------------------------------------------------


def ref_divergence(steps, losses, beta=0.9, margin=1.0):
    """Straight from the definition, recomputing every EMA from scratch."""
    for i, s in enumerate(steps):
        if losses[i] is None or not math.isfinite(losses[i]):
            return s
        emas = []
        for j in range(i + 1):
            emas.append(losses[0] if j == 0 else beta * emas[-1] + (1 - beta) * losses[j])
        if emas[-1] > min(emas) + margin:
            return s
    return None


def ref_spike(values, window=128, sigmas=6.0, min_std=1e-10):
    """OLMo-core's stability-monitor rule, written out: every value enters the history; a value is
    a spike when the history holds ``window`` values, their std is >= min_std and it exceeds
    mean + sigmas * std (a non-finite history or value never compares as a spike)."""
    out, hist = [], []
    for x in values:
        spike = False
        if len(hist) >= window:
            mean = sum(hist) / len(hist)
            std = math.sqrt(sum((v - mean) ** 2 for v in hist) / len(hist))
            spike = bool(std >= min_std and x > mean + sigmas * std)
        out.append(spike)
        hist = (hist + [x])[-window:]
    return out


# --- divergence ---------------------------------------------------------------------------------------


def test_divergence_nan_is_divergence():
    assert logs.divergence_step([1, 2, 3, 4], [3.0, 2.9, float("nan"), 2.0]) == 3
    assert logs.divergence_step([1, 2, 3], [3.0, None, 2.0]) == 2
    assert logs.divergence_step([1, 2, 3], [3.0, 2.0, float("inf")]) == 3


def test_divergence_none_for_decreasing_loss():
    s = list(range(100))
    assert logs.divergence_step(s, [5 - 0.01 * i for i in s]) is None


def test_divergence_single_spike_is_smoothed_away():
    loss = [2.0] * 50
    loss[25] = 9.0  # one bad batch: EMA moves by 0.7 < 1 nat
    assert logs.divergence_step(list(range(50)), loss) is None


def test_divergence_sustained_rise_found():
    loss = [2.0] * 50 + [4.0] * 50
    d = logs.divergence_step(list(range(100)), loss)
    # EMA crosses 3.0 when 2 + 2 * (1 - 0.9^k) > 3, i.e. k = 7 points after the jump
    assert d == 50 + 6


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.floats(0, 10), st.just(float("nan"))), min_size=1, max_size=60))
def test_divergence_matches_reference(losses):
    steps = list(range(10, 10 + 10 * len(losses), 10))
    assert logs.divergence_step(steps, losses) == ref_divergence(steps, losses)


def test_divergence_agrees_with_drills():
    drills = pytest.importorskip("ckptscan.drills.train")
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = 200
        loss = (
            3 + 0.3 * rng.standard_normal(n) + np.where(np.arange(n) > rng.integers(50, 250), 2.0, 0)
        ).tolist()
        steps = list(range(1, n + 1))
        assert logs.divergence_step(steps, loss) == drills.divergence_step(steps, loss)


# --- spike rule -------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 5), min_size=0, max_size=200), st.integers(0, 199), st.floats(0, 100))
def test_spike_matches_reference(vals, where, bump):
    vals = list(vals)
    if vals:
        vals[where % len(vals)] += bump
    got = logs.spike_alarms(vals).tolist()
    assert got == ref_spike(vals)


def test_spike_small_window_parameters_match_reference():
    rng = np.random.default_rng(1)
    v = rng.standard_normal(300).tolist()
    v[150] = 50.0
    v[200] = float("nan")
    got = logs.spike_alarms(v, window=16, sigmas=3.0).tolist()
    assert got == ref_spike(v, window=16, sigmas=3.0)
    # the spike alarms; the NaN does not, nor anything while it sits in the window
    assert got[150] and not any(got[200:217])


def test_spike_needs_a_full_window_and_a_window_that_moves():
    v = [1.0 + 0.01 * (i % 3) for i in range(200)]
    v[100] = 9.0  # a spike with only 100 values before it: OLMo-core does not check yet
    v[150] = 9.0  # with a full window
    assert logs.spike_alarms(v).tolist() == [i == 150 for i in range(200)]
    flat = [2.0] * 200
    flat[180] = 2.0 + 1e-6  # above mean + 6 sigma, but the window is flat (std < 1e-10): no alarm
    assert not logs.spike_alarms(flat).any()


def test_log_only_alarm_uses_grad_norm_too():
    steps = np.arange(1, 201)
    loss = np.full(200, 2.0) + 0.01 * np.sin(steps)
    g = np.full(200, 1.0) + 0.01 * np.cos(steps)
    g[140] = 10.0
    c = logs.LossCurve(None, steps, loss, g, None)
    assert logs.log_only_alarm(c) == 141
    c2 = logs.LossCurve(None, steps, loss, None, None)
    assert logs.log_only_alarm(c2) is None


def test_log_only_alarm_steps_are_every_reference_alarm(tmp_path):
    """All alarm steps (loss or grad norm) = the union of the slow reference's masks; summary lists
    them up to the divergence plus the first one after it."""
    rng = np.random.default_rng(3)
    steps = np.arange(1, 401)
    loss = 3.0 + 0.01 * rng.standard_normal(400)
    g = 1.0 + 0.01 * rng.standard_normal(400)
    g[[100, 140, 180]] = 5.0  # 100: before the 128-value window is full
    loss[250] = 4.0
    loss[300:] += 2.0  # diverges
    c = logs.LossCurve(None, steps, loss, g, None)
    rl, rg = ref_spike(loss.tolist()), ref_spike(g.tolist())
    want = [int(s) for s, a, b in zip(steps, rl, rg, strict=False) if a or b]
    assert logs.log_only_alarm_steps(c) == want and want[:3] == [141, 181, 251]
    assert logs.log_only_alarm(c) == want[0]
    (tmp_path / "metrics.jsonl").write_text(
        "\n".join(
            json.dumps({"step": int(s), "loss": float(lv), "grad_norm": float(gv)})
            for s, lv, gv in zip(steps, loss, g, strict=False)
        )
    )
    summ = logs.summarize(tmp_path)
    div = summ["divergence_step"]
    assert div is not None and div > 300
    assert summ["log_only_alarm_steps"] == [s for s in want if s <= div] + [s for s in want if s > div][:1]


# --- readers ----------------------------------------------------------------------------------------


def test_jsonl_with_null_bad_lines_and_relogged_steps(tmp_path):
    p = tmp_path / "metrics.jsonl"
    lines = [
        json.dumps({"step": 1, "loss": 3.0, "grad_norm": 1.0, "lr": 1e-3}),
        "{not json",
        json.dumps({"step": 2, "loss": 2.5, "grad_norm": None, "learning_rate": 1e-3}),
        json.dumps({"step": 3, "eval_loss": 9.0}),  # eval line: no training loss, silently ignored
        json.dumps([1, 2]),
        json.dumps({"loss": 1.0}),  # loss without step
        json.dumps({"step": 2, "loss": 2.4}),  # re-logged after a restart: last wins
        json.dumps({"step": 4, "loss": None}),  # null = non-finite
        json.dumps({"step": "x", "loss": 1.0}),
        "",
    ]
    p.write_text("\n".join(lines))
    c = logs.read_log(p)
    assert c.steps.tolist() == [1, 2, 4]
    assert c.loss[:2].tolist() == [3.0, 2.4]
    assert math.isnan(c.loss[2])
    assert c.grad_norm is not None and c.grad_norm[0] == 1.0
    assert c.lr is not None
    assert len([n for n in c.notes if "skipped" in n]) == 4
    assert logs.divergence_step(c.steps, c.loss) == 4


def test_trainer_state_newest_checkpoint(tmp_path):
    run = tmp_path / "run"

    def state(n, last_loss):
        hist = [
            {"step": s, "loss": 2.0, "grad_norm": 1.0, "learning_rate": 1e-4} for s in range(10, n + 1, 10)
        ]
        hist.append({"step": n, "eval_loss": 1.0})
        hist.append({"step": n + 5, "loss": last_loss})
        hist.append({"step": n, "train_runtime": 1.0, "train_loss": "oops"})  # summary line: bad value
        return {"global_step": n + 5, "log_history": hist}

    for n in (100, 1000, 200):
        d = run / f"checkpoint-{n}"
        d.mkdir(parents=True)
        (d / "trainer_state.json").write_text(json.dumps(state(n, float("nan"))).replace("NaN", "NaN"))
    p = logs.find_log(run)
    assert p == run / "checkpoint-1000" / "trainer_state.json"
    c = logs.read_log(p)
    assert c.steps[-1] == 1005 and math.isnan(c.loss[-1])
    assert logs.divergence_step(c.steps, c.loss) == 1005
    # a run-root trainer_state that logs further wins
    (run / "trainer_state.json").write_text(json.dumps(state(2000, 1.0)))
    assert logs.find_log(run) == run / "trainer_state.json"


def test_csv(tmp_path):
    p = tmp_path / "log.csv"
    p.write_text(
        "step,loss,grad_norm,lr\n1,3.0,1.0,0.1\n2,nan,,0.1\n3,abc,1,1\n4,,1,1\n5,2.0,1.0,0.1,extra\n6,1.5,0.5,0.1\n"
    )
    c = logs.read_log(p)
    assert c.steps.tolist() == [1, 2, 6]
    assert math.isnan(c.loss[1])
    assert math.isnan(c.grad_norm[1])
    assert len([n for n in c.notes if "skipped" in n]) == 2


def test_csv_without_loss_column(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    c = logs.read_log(p)
    assert len(c) == 0 and c.notes


def test_garbage_files_never_raise(tmp_path):
    for name, content in [
        ("a.jsonl", b"\xff\xfe\x00garbage"),
        ("trainer_state.json", b"[1,2"),
        ("b.csv", b"\x00\x01"),
    ]:
        p = tmp_path / name
        p.write_bytes(content)
        c = logs.read_log(p)
        assert len(c) == 0


def test_summarize_without_log(tmp_path):
    s = logs.summarize(tmp_path)
    assert s["divergence_step"] is None and s["log"]["points"] == 0
    s = logs.summarize(tmp_path, log_file=tmp_path / "missing.jsonl")
    assert s["log"]["points"] == 0 and s["log"]["notes"]


def test_explicit_log_file_overrides(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
    other = tmp_path / "other.jsonl"
    other.write_text("\n".join(json.dumps({"step": s, "loss": 1.0}) for s in range(5)))
    assert logs.find_log(tmp_path) == tmp_path / "metrics.jsonl"
    assert logs.summarize(tmp_path, log_file=other)["log"]["points"] == 5


def test_spike_rule_on_non_finite_values_as_olmo_core_does():
    """OLMo-core compares ``value > mean + 6 * std`` in floats: NaN never alarms, +inf does, and either
    in the window makes its mean non-finite, so nothing alarms while it is there."""
    v = [1.0 + 0.01 * (i % 3) for i in range(400)]
    v[150], v[300] = float("nan"), float("inf")
    got = logs.spike_alarms(v).tolist()
    assert [i for i, a in enumerate(got) if a] == [300]
