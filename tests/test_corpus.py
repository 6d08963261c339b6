"""The calibration corpus generator (benchmarks/corpus): its attention kernel, LR shapes, run lists,
and one tiny run per training stack.  Skipped without the ``corpus`` extra (transformers, lightning)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("lightning")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.corpus import common, faults, recipes
from benchmarks.corpus.common import KERNEL_ENV, SEQ_LEN, RunSpec, StepRecord, build_model, lm_loss
from benchmarks.corpus.generate import train_one
from benchmarks.corpus.schedules import planned_lr
from ckptscan.drills.evaluate import recipe_key

TINY = {"opt": "adamw", "lr": 3e-3, "schedule": "cos", "warmup": 10, "steps": 60, "save_every": 20, "seed": 0}


def _kv_heads(model: str) -> int:
    """A tiny model's KV heads: 2 of its 4 query heads, or 4 where the family has no grouping."""
    return 4 if model in common.UNGROUPED_MODELS else 2


def _grads(model, ids):
    model.zero_grad(set_to_none=True)
    loss, ce = lm_loss(model, ids)
    loss.backward()
    return ce.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("name", ["llama", "mixtral", *common.FUSED_QKV_MODELS])
def test_lowprec_kernel_matches_eager_attention_when_inactive(name):
    spec = RunSpec(framework="plain", model=name, kv_heads=_kv_heads(name), **TINY)
    ours = build_model(spec)
    eager = build_model(spec)
    eager.config._attn_implementation = "eager"
    ids = torch.randint(0, 256, (2, SEQ_LEN + 1), generator=torch.Generator().manual_seed(0))
    faults.set_lowprec(1, onset=None, severity=None)
    ce_ours, g_ours = _grads(ours, ids)
    ce_eager, g_eager = _grads(eager, ids)
    torch.testing.assert_close(ce_ours, ce_eager, rtol=1e-5, atol=1e-6)
    for n in g_eager:
        torch.testing.assert_close(g_ours[n], g_eager[n], rtol=1e-4, atol=1e-7, msg=n)
    # switched on, the fault moves only the q/k gradients (D enters dS; dV and the forward are exact)
    faults.set_lowprec(500, onset=1, severity=1000.0)
    try:
        ce_fault, g_fault = _grads(ours, ids)
    finally:
        faults.set_lowprec(1, onset=None, severity=None)
    torch.testing.assert_close(ce_fault, ce_ours)
    if name in common.FUSED_QKV_MODELS:  # q, k and v in one matrix: split it as ckptscan does
        from ckptscan.layouts import resolve_layout
        from tests.test_layouts import Recorder, infos_of

        lay = resolve_layout(infos_of(g_ours), ours.config.to_dict())
        block = next(b for b in lay.attention if b.layer == 1)
        (fused,) = block.tensors
        moved = g_fault[fused] - g_ours[fused]
        dq, dk = block.load(Recorder({fused: moved}))
        assert dq.norm() > 0 and dk.norm() > 0  # the q and k rows moved, and nothing else did
        torch.testing.assert_close(moved.norm() ** 2, dq.norm() ** 2 + dk.norm() ** 2, rtol=1e-4, atol=0)
        return
    layer = "model.layers.1.self_attn."
    assert not torch.allclose(g_fault[layer + "q_proj.weight"], g_ours[layer + "q_proj.weight"])
    torch.testing.assert_close(g_fault[layer + "v_proj.weight"], g_ours[layer + "v_proj.weight"])


def test_lr_fault_shapes_and_benign_schedules():
    assert faults.lr_multiplier(99, 100, {"shape": "jump", "factor": 8}) == 1.0
    assert faults.lr_multiplier(100, 100, {"shape": "jump", "factor": 8}) == 8.0
    assert faults.lr_multiplier(1100, 100, {"shape": "growth", "growth": 2}) == pytest.approx(math.e**2)
    jg = {"shape": "jump-growth", "factor": 4, "growth": 3}
    assert faults.lr_multiplier(100, 100, jg) == 4
    assert faults.lr_multiplier(1100, 100, jg) == pytest.approx(4 * math.e**3)
    ramp = {"shape": "ramp", "factor": 11, "ramp_steps": 100}
    assert faults.lr_multiplier(149, 100, ramp) == pytest.approx(6.0)
    assert faults.lr_multiplier(199, 100, ramp) == faults.lr_multiplier(900, 100, ramp) == 11
    kw = {"peak": 1.0, "warmup": 300, "total": 1500}
    for sched in ("cos", "lin", "wsd", "const"):
        assert planned_lr(300, schedule=sched, **kw) == 1.0
    assert planned_lr(1500, schedule="lin", **kw) == 0.0 and planned_lr(1200, schedule="wsd", **kw) == 1.0
    # warm-up cut at 200 of a planned 300: the LR jumps by x1.5 to the peak, never more than x2
    before, after = (planned_lr(s, schedule="cos", onset=200, benign="warmup-cut", **kw) for s in (199, 200))
    assert 1 < after / before <= 2
    rewarm = [planned_lr(s, schedule="cos", onset=800, benign="rewarm", **kw) for s in range(790, 900)]
    assert max(rewarm[10:]) <= 0.5 and rewarm[10] < rewarm[9]


def test_a_run_stops_two_saves_after_a_non_finite_loss():
    rec = StepRecord(RunSpec(framework="plain", model="llama", **{**TINY, "steps": 200}))
    for step, loss in enumerate([3.0] * 44 + [math.nan], start=1):
        rec.add(step, loss)
    assert rec.nan_step == 45 and rec.stop_step == 100  # the save at 60 (after the NaN), then 80 and 100
    assert not rec.should_stop(99) and rec.should_stop(100)


def test_parts_are_disjoint_and_cover_the_matrix():
    parts = {name: make() for name, make in recipes.PARTS.items()}
    seen: set[int] = set()
    for name, part in parts.items():
        seeds = {s.seed for s in part}
        assert seeds.isdisjoint(seen), f"{name} shares a seed with an earlier part"
        seen |= seeds
        assert len({s.name for s in part}) == len(part), f"{name}: two runs share a folder name"
        if name.endswith("ref"):  # a reference part: checked below
            continue
        assert {s.framework for s in part} == {"hf", "plain", "lightning"}
        assert {s.save_every for s in part} == {10, 25, 50, 100, 250}
        assert {s.schedule for s in part} == {"cos", "lin", "wsd", "const"}
        assert {s.fault for s in part} == {"none", "lowprec-attention", "high-lr", "combined"}
        assert {s.benign for s in part} == {None, "warmup-cut", "data-switch", "rewarm"}
        assert {s.lr_fault["shape"] for s in part if s.lr_fault} == set(faults.LR_SHAPES)
        opts = {s.opt for s in part}
        assert (
            opts >= {"adamw", "sgd"}
            or (name in ("holdout70", "holdout71") and opts == {"muon", "muon02"})
            or (name == "holdout72" and {s.opt_tag for s in part} == {"lion99", "lion98b95"})
        )
        assert {s.moe for s in part} == {True, False}
        healthy = {s.recipe for s in part if s.fault == "none" and s.benign is None}
        assert all(s.recipe in healthy for s in part), "every run has a healthy twin"


def test_a_reference_part_has_one_healthy_run_per_recipe_of_its_part_with_other_seeds():
    refs = [name for name in recipes.PARTS if name.endswith("ref")]
    assert refs
    for name in refs:
        part = recipes.PARTS[name.removesuffix("ref")]()
        ref = recipes.PARTS[name]()
        assert all(s.fault == "none" and s.benign is None for s in ref)
        healthy = [s for s in part if s.fault == "none" and s.benign is None]
        assert len(ref) == len(healthy) == len({s.recipe for s in part})
        offset = recipes.REFERENCE_SEED_OFFSET
        assert {dataclasses.replace(s, seed=s.seed - offset) for s in ref} == set(healthy)
        assert {s.seed for s in ref}.isdisjoint({s.seed for s in part})


def test_the_deeper_part_trains_every_depth_at_every_cadence():
    for deep in ("holdout52", "holdout69"):
        part = recipes.PARTS[deep]()
        healthy = [s for s in part if s.fault == "none" and s.benign is None]
        assert {(s.layers, s.save_every) for s in healthy} == {
            (d, e) for d in (4, 6, 8) for e in (10, 25, 50, 100, 250)
        }, deep
        assert all(f"-L{s.layers}-" in s.name for s in part), deep
    for name in (
        "holdout51",
        "holdout61",
        "holdout62",
        "holdout63",
        "holdout64",
        "holdout65",
        "holdout66",
        "holdout67",
        "holdout68",
        "holdout70",
        "holdout71",
        "holdout72",
    ):  # narrow, 2 layers
        narrow = recipes.PARTS[name]()
        assert all(s.layers == 2 and "-L" not in s.recipe and "-H" not in s.recipe for s in narrow), name
        assert {(s.heads, s.kv_heads, s.head_dim) for s in narrow} == {(4, 2, 16)}, name
    spec = next(s for s in healthy if s.layers == 6)
    assert common.model_config(spec.model, spec.layers).num_hidden_layers == 6


@pytest.mark.parametrize("name", ["holdout73", "holdout74"])
def test_the_fused_qkv_part_trains_every_fused_family_at_every_cadence(name):
    part = recipes.PARTS[name]()
    healthy = [s for s in part if s.fault == "none" and s.benign is None]
    assert {(s.model, s.save_every) for s in healthy} >= {
        (m, e) for m in common.FUSED_QKV_MODELS for e in (10, 25, 50, 100, 250)
    }
    assert {s.model for s in part} == {*common.FUSED_QKV_MODELS, "mixtral"}
    for s in part:  # GPT-2 and GPT-NeoX have a KV head per query head, and their names say so
        ungrouped = s.model in common.UNGROUPED_MODELS
        assert (s.kv_heads == s.heads) == ungrouped and ("-H4k4-" in s.name) == ungrouped, s.name
        assert s.layers == 2 and s.head_dim == 16


def test_the_wider_part_trains_every_width_at_every_cadence():
    part = recipes.PARTS["holdout54"]()
    healthy = [s for s in part if s.fault == "none" and s.benign is None]
    widths = {(8, 2, 16), (16, 4, 8), (8, 8, 16)}
    assert {((s.heads, s.kv_heads, s.head_dim), s.save_every) for s in healthy} == {
        (w, e) for w in widths for e in (10, 25, 50, 100, 250)
    }
    assert all(f"-H{s.heads}k{s.kv_heads}{'' if s.head_dim == 16 else 'd8'}-" in s.name for s in part)
    assert all("-H" not in s.recipe for s in recipes.PARTS["holdout53"]())
    for name in ("holdout55", "holdout56", "holdout57"):
        wide_deep = [s for s in recipes.PARTS[name]() if s.fault == "none" and s.benign is None]
        assert {(s.heads, s.kv_heads, s.head_dim, s.layers) for s in wide_deep} == {
            (*w, d) for w in widths for d in (2, 4)
        }, name
    every_width = widths | {(4, 2, 16)}
    for name in ("holdout58", "holdout59", "holdout60"):
        mixed = [s for s in recipes.PARTS[name]() if s.fault == "none" and s.benign is None]
        assert {(s.heads, s.kv_heads, s.head_dim, s.layers) for s in mixed} == {
            (*w, d) for w in every_width for d in (2, 4)
        }, name
        assert {((s.heads, s.kv_heads, s.head_dim), s.save_every) for s in mixed} == {
            (w, e) for w in every_width for e in (10, 25, 50, 100, 250)
        }, name
    spec = next(s for s in healthy if s.heads == 16 and s.model == "mixtral")
    cfg = common.model_config(spec.model, spec.layers, spec.heads, spec.kv_heads, spec.head_dim)
    shape = (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim)
    assert shape == (128, 16, 4, 8)
    assert cfg.intermediate_size == 2 * 32  # the experts widen with the model
    narrow = common.model_config(spec.model, spec.layers)  # the parts before: 64 wide, as they were
    assert (narrow.hidden_size, narrow.num_attention_heads, narrow.intermediate_size) == (64, 4, 32)


@pytest.fixture
def keep_threads():
    """train_one trains on one thread (as the corpus does); give the test session its threads back."""
    old = torch.get_num_threads()
    yield
    torch.set_num_threads(old)


@pytest.mark.slow
def test_one_tiny_run_per_stack(tmp_path, keep_threads):
    trees = {
        "hf": "checkpoint-{}/model.safetensors",
        "plain": "step_{}/model.safetensors",
        "lightning": "lightning_logs/version_0/checkpoints/epoch=0-step={}.ckpt",
    }
    for spec in recipes.smoke_specs():
        run = tmp_path / spec.name
        truth = train_one(str(run), spec)
        assert json.loads((run / "truth.json").read_text()) == json.loads(json.dumps(truth))
        assert truth["steps_run"] == 60 and truth["checkpoints"] and truth["divergence_step"] is None
        for step in (20, 40, 60):
            assert (run / trees[spec.framework].format(step)).is_file()
        assert truth["fault"] == spec.fault
        assert truth["versions"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
        assert truth["versions"]["kernel_env"] == {k: os.environ[k] for k in KERNEL_ENV if k in os.environ}
        assert truth["onset_step"] == (spec.onset if spec.fault != "none" else None)
        assert recipe_key(truth)  # the keys ckptscan eval pairs twins with are present
        for key in ("naming", "model", "seq_len", "batch_size", "framework", "optimizer", "schedule"):
            assert key in truth["params"]
    hf, _, lightning = (tmp_path / s.name for s in recipes.smoke_specs())
    assert (lightning / "config.json").is_file()  # Lightning: the HF config at the run root
    state = json.loads((hf / "checkpoint-60" / "trainer_state.json").read_text())
    assert [e["step"] for e in state["log_history"] if "loss" in e] == list(range(1, 61))
    sd = torch.load(lightning / trees["lightning"].format(60), weights_only=True)
    assert any(k.startswith("model.model.layers.0.self_attn.q_proj") for k in sd["state_dict"])


def test_changed_lists_only_the_runs_whose_verdict_moved(tmp_path, capsys):
    """``benchmarks/corpus/changed.py``: a run whose verdict, path or date moved is listed with both
    readings; an identical run, or one that differs only in a field outside the verdict (a lead
    time), is not; a run in one file only is."""
    from benchmarks.corpus import changed

    same = {"run": "a", "truth": "healthy", "verdict": "healthy", "decision": "healthy", "lead_time": 1}
    moved = {
        "run": "b",
        "truth": "high_lr",
        "verdict": "healthy",
        "decision": "healthy",
        "earliest_step": None,
    }
    before = [same, moved]
    after = [
        dict(same, lead_time=2),
        dict(moved, verdict="high_lr", decision="high_lr/rise", earliest_step=1350),
        {"run": "c", "verdict": "healthy"},
    ]
    assert [run for run, _, _ in changed.changed(before, after)] == ["b", "c"]
    for name, rows in (("before.json", before), ("after.json", after)):
        (tmp_path / name).write_text(json.dumps({"rows": rows}))
    assert changed.main([str(tmp_path / "before.json"), str(tmp_path / "after.json")]) == 0
    out = capsys.readouterr().out
    assert "decision high_lr/rise" in out and out.strip().endswith("2 of 3 runs changed")


def test_score_names_what_trained_the_runs():
    """``score.py``'s ``generated_with``: each combination of library versions and CPU kernel path
    with its number of runs, and a run that did not record its kernel path said so, not merged with
    one that did."""
    from benchmarks.corpus.score import generated_with

    avx512 = {"torch": "2.13.0+cpu", "transformers": "5.25.0", "cpu_capability": "AVX512"}
    text = generated_with(
        [
            {"versions": avx512},
            {"versions": avx512},
            {"versions": dict(avx512, cpu_capability="AVX2")},
            {"versions": {"torch": "2.13.0+cpu", "transformers": "5.25.0"}},
            {"versions": dict(avx512, cpu_capability="AVX2", kernel_env={"MKL_ENABLE_INSTRUCTIONS": "AVX2"})},
        ]
    )
    assert text.count("run") == 4
    assert "cpu_capability AVX2 (MKL_ENABLE_INSTRUCTIONS=AVX2) (1 run)" in text
    assert "cpu_capability AVX512 (2 runs)" in text and "cpu_capability AVX2 (1 run)" in text
    assert "cpu_capability not recorded (1 run)" in text


def test_score_says_where_fault_runs_went_wrong():
    """``score.py``'s ``misses``: every fault run's verdict per true class, and the fault runs not
    detected grouped by what their window held (no checkpoint, none examined, examined); healthy
    runs and detected runs are not misses."""
    from benchmarks.corpus.score import misses

    def row(truth, verdict, detected, window=None, examined=None):
        return {
            "truth": truth,
            "verdict": verdict,
            "detected": detected,
            "checkpoints_in_window": window,
            "examined_in_window": examined,
        }

    m = misses(
        [
            row("healthy", "healthy", None),
            row("healthy", "high_lr", None),
            row("high_lr", "high_lr", True, 5, 3),
            row("high_lr", "healthy", False, 5, 3),
            row("high_lr", "high_lr", False, 0, 0),
            row("combined", "lowprec_attention", True, 4, 4),
            row("lowprec_attention", "lowprec_attention", False, 2, 0),
            row("lowprec_attention", None, False),
        ]
    )
    assert m["read_as"] == {
        "combined": {"lowprec_attention": 1},
        "high_lr": {"healthy": 1, "high_lr": 2},
        "lowprec_attention": {"None": 1, "lowprec_attention": 1},
    }
    assert m["missed"] == {
        "examined": {"healthy": 1},
        "no checkpoint": {"high_lr": 1},
        "none examined": {"lowprec_attention": 1},
        "unknown": {"None": 1},
    }


def test_score_finds_each_runs_reference(tmp_path, monkeypatch):
    """``score.py --reference``: ``twin`` gives a fault or benign run its healthy twin (the same
    recipe), a healthy run none (it would be read against itself); a reference folder gives every
    run the healthy run of its recipe with another seed, and a run whose recipe has none, or whose
    reference has its own seed, or a folder with two healthy runs of one recipe, stops the scoring
    with its name (no run judged against the wrong reference)."""
    from benchmarks.corpus import score
    from ckptscan import api

    def write(root, name, recipe, fault="none", benign=None):
        (root / name).mkdir(parents=True)
        seed = int(recipe.split("-s")[1].split("-")[0])
        truth = {"recipe": recipe, "fault": fault, "benign": benign, "seed": seed}
        (root / name / "truth.json").write_text(json.dumps(truth))
        return root / name

    part, ref_part = tmp_path / "part", tmp_path / "ref"
    healthy = write(part, "a-s7-healthy", "hf-llama-e25-s7-full")
    fault = write(part, "a-s7-highlr", "hf-llama-e25-s7-full", fault="high-lr")
    benign = write(part, "a-s7-rewarm", "hf-llama-e25-s7-full", benign="rewarm")
    orphan = write(part, "b-s8-highlr", "plain-qwen3-e10-s8", fault="high-lr")
    write(ref_part, "a-s57-healthy", "hf-llama-e25-s57-full")

    class Stored:
        def __init__(self, out):
            self.timeline = Path(out).name

    monkeypatch.setattr(api, "load_result", Stored)
    twin = score.reference_finder([part], tmp_path / "out", "twin", None)
    truth = lambda run: json.loads((run / "truth.json").read_text())  # noqa: E731
    assert (
        twin(fault, truth(fault)).run == str(healthy) and twin(fault, truth(fault)).timeline == healthy.name
    )
    assert twin(benign, truth(benign)).run == str(healthy)
    assert twin(healthy, truth(healthy)) is None and twin(orphan, truth(orphan)) is None
    other = score.reference_finder([part], tmp_path / "out", str(ref_part), tmp_path / "ref-out")
    for run in (healthy, fault, benign):
        got = other(run, truth(run))
        assert got.run == str(ref_part / "a-s57-healthy") and got.out == str(
            tmp_path / "ref-out" / "a-s57-healthy"
        )
    with pytest.raises(SystemExit, match="b-s8-highlr"):
        other(orphan, truth(orphan))
    itself = score.reference_finder([part], tmp_path / "out", str(part), tmp_path / "out")
    with pytest.raises(SystemExit, match="has its seed"):  # the part given as its own reference
        itself(fault, truth(fault))
    with pytest.raises(SystemExit, match="a second healthy run"):
        write(ref_part, "a-s58-healthy", "hf-llama-e25-s58-full")
        score.reference_finder([part], tmp_path / "out", str(ref_part), tmp_path / "ref-out")
    with pytest.raises(SystemExit, match="reference-out"):
        score.reference_finder([part], tmp_path / "out", str(ref_part), None)


def test_score_tells_the_faults_that_did_harm_from_those_that_did_not():
    """``score.py``'s ``harm``: a fault run did harm where it diverged or ended more than the margin
    over its healthy twin's final loss (the same recipe, no fault, no benign event); a benign run's
    departure is measured, never called harm; a run with no twin or no finite loss is not told.
    ``harm_lines`` counts detection apart for each group."""
    from benchmarks.corpus.score import harm, harm_lines

    def pair(run, truth, recipe, loss, benign=None, divergence=None, detected=None, examined=None):
        row = {"run": run, "truth": truth, "divergence": divergence, "detected": detected}
        row["examined_in_window"] = examined
        return row, {"recipe": recipe, "final_loss": loss, "benign": benign}

    pairs = [
        pair("a-healthy", "healthy", "a", 2.0),
        pair("a-rewarm", "healthy", "a", 2.1, benign="rewarm"),
        pair("a-worse", "high_lr", "a", 2.3, detected=True, examined=3),
        pair("a-better", "high_lr", "a", 1.9, detected=False, examined=3),
        pair("a-edge", "high_lr", "a", 2.14, detected=False, examined=2),
        pair("a-diverged", "combined", "a", float("nan"), divergence=700, detected=False, examined=0),
        pair("b-orphan", "lowprec_attention", "b", 2.5, detected=True, examined=1),
        pair("c-healthy", "healthy", "c", float("inf")),  # no finite loss: no twin
        pair("c-worse", "high_lr", "c", 2.9, detected=False, examined=1),
        pair("d-healthy", "healthy", None, 1.0),  # no recipe: nobody's twin
        pair("d-worse", "high_lr", None, 2.9, detected=False, examined=1),
    ]
    h = harm(pairs, margin=0.15)
    assert "a-healthy" not in h
    assert h["a-rewarm"]["harmed"] is None and math.isclose(h["a-rewarm"]["over"], 0.1)
    assert h["a-worse"]["harmed"] is True and math.isclose(h["a-worse"]["over"], 0.3)
    assert h["a-better"]["harmed"] is False
    assert h["a-edge"]["harmed"] is False  # within the margin
    assert h["a-diverged"] == {"over": None, "harmed": True}
    assert h["b-orphan"] == {"over": None, "harmed": None}
    assert h["c-worse"] == h["d-worse"] == {"over": None, "harmed": None}
    lines = harm_lines(pairs, margin=0.15)
    assert lines[0].startswith(
        "benign runs' final loss less their healthy twin's: 1 run, largest departure 0.100 nats (harm: more"
    )
    assert (
        "did harm" in lines[1] and ": 1/2 detected; with a checkpoint examined in the window 1/1;" in lines[1]
    )
    assert lines[1].endswith("combined 0/1, high_lr 1/1")
    assert (
        "no harm that was seen" in lines[2]
        and ": 0/2 detected;" in lines[2]
        and lines[2].endswith("high_lr 0/2")
    )
    assert "not told" in lines[3] and lines[3].endswith("high_lr 0/2, lowprec_attention 1/1")


@pytest.mark.parametrize("k,n", [(0, 65), (1, 65), (57, 68), (54, 68), (68, 68), (3, 7)])
def test_score_interval_is_the_exact_binomial_interval(k, n):
    """``score.py``'s ``interval`` against its definition, read off the binomial tails directly: at
    the lower end, seeing ``k`` or more has a chance of 2.5 %; at the upper end, seeing ``k`` or
    fewer; at the ends of the scale (0 of n, n of n) the interval is closed there."""
    from scipy.stats import binom

    from benchmarks.corpus.score import interval

    lo, hi = interval(k, n)
    assert 0.0 <= lo < k / n + 1e-12 and k / n - 1e-12 < hi <= 1.0
    if k == 0:
        assert lo == 0.0
    else:
        assert math.isclose(binom.sf(k - 1, n, lo), 0.025, rel_tol=1e-6)  # P(X >= k) at lo
    if k == n:
        assert hi == 1.0
    else:
        assert math.isclose(binom.cdf(k, n, hi), 0.025, rel_tol=1e-6)  # P(X <= k) at hi


def test_score_reliability_bins_verdicts_by_confidence():
    """``score.py``'s ``reliability``: each verdict with a confidence falls in exactly one bin, the
    bar's 0.9 in the top one (with 1.0), 0.899 in the next; a verdict without a number in none;
    an empty bin is kept."""
    from benchmarks.corpus.score import reliability

    rows = [
        {"confidence": 1.0, "class_right": True},
        {"confidence": 0.9, "class_right": False},
        {"confidence": 0.899, "class_right": True},
        {"confidence": 0.8, "class_right": True},
        {"confidence": 0.0, "class_right": False},
        {"confidence": None, "class_right": False},
    ]
    assert reliability(rows) == [
        (0.9, 1.0, 1, 2),
        (0.8, 0.9, 2, 2),
        (0.5, 0.8, 0, 0),
        (0.0, 0.5, 0, 1),
    ]


def test_twin_ceiling_reads_departures_from_the_twin_in_the_window():
    """``benchmarks/corpus/twin_ceiling.py``'s ``departures``: the step size over the twin's is read
    only where the output projections moved too, at the layer count the whole-model rules need,
    and a layer's median D2 entropy under the twin's; only at checkpoints at or after the onset and
    before the divergence."""
    import numpy as np

    from benchmarks.corpus.twin_ceiling import departures
    from ckptscan.store.timeline import Timeline

    steps = list(range(100, 1100, 100))
    n = len(steps)

    def run(qk=1.0, out=1.0, fall=0.0):
        ratio = np.full((n, 2, 2), 0.1)
        proj = np.full((n, 2), 0.1)
        ent = np.full((n, 2, 2), 0.6)
        ratio[5:] *= qk  # from step 600 on
        proj[5:] *= out
        ent[7:, 0] -= fall  # layer 0, from step 800 on
        return Timeline.from_arrays(
            steps,
            {
                "attn.q.update_ratio": ratio,
                "attn.k.update_ratio": ratio.copy(),
                "out.update_ratio": proj,
                "attn.D2.entropy2": ent,
            },
        )

    twin = run()
    step, fall, read = departures(run(qk=3.0, out=3.0, fall=0.2), twin, 550, 900)
    assert read == 3 and step == pytest.approx(3.0) and fall == pytest.approx(0.2)
    # the q/k step size alone (the low-precision fault's own update jump) is no LR departure
    assert departures(run(qk=3.0), twin, 550, 900)[0] == pytest.approx(1.0)
    # nothing read after the divergence, nor before the onset
    assert departures(run(qk=3.0, out=3.0, fall=0.2), twin, 550, 600) == (1.0, 0.0, 0)
    assert departures(run(qk=3.0, out=3.0, fall=0.2), twin, 1100, None) == (1.0, 0.0, 0)
    # one layer of two moving is not the model's step size (two layers needed)
    one = run()
    one.series["out.update_ratio"][5:, 0] *= 3.0
    one.series["attn.q.update_ratio"][5:, 0] *= 3.0
    one.series["attn.k.update_ratio"][5:, 0] *= 3.0
    assert departures(one, twin, 550, None)[0] == pytest.approx(1.0)


def test_lone_heads_lists_a_head_alarming_alone_and_not_heads_falling_together():
    """``benchmarks/corpus/lone_heads.py``'s ``lone_alarms``: in a model of 2 layers of 16 heads (32
    head series), one head whose D2 entropy settles lower is read alone whatever its peak (the
    lone-head rule off); two heads of the other layer falling together, earlier, are not alone."""
    from benchmarks.corpus.lone_heads import lone_alarms
    from ckptscan.judge import detect
    from ckptscan.store.timeline import Timeline
    from tests.test_detect import _fine_run

    off = detect.Params(z_lone=0.0, lone_growth=0.0)
    for seed in range(3):
        steps, s = _fine_run(seed, heads=16)
        s["attn.D2.entropy2"][steps > 1100, 1, 2] -= 0.25
        series, lone = lone_alarms(Timeline.from_arrays(steps, s))
        assert series == 32 and [(a.layer, a.head) for a in lone] == [(1, 2)], lone
        for h in (5, 6):
            s["attn.D2.entropy2"][steps > 700, 0, h] -= 0.25
        t = Timeline.from_arrays(steps, s)
        assert {(a.layer, a.head) for a in detect.detect(t, off)} == {(0, 5), (0, 6), (1, 2)}, seed
        assert [(a.layer, a.head) for a in lone_alarms(t)[1]] == [(1, 2)], seed


def test_breakdown_counts_fault_runs_by_the_onsets_phase():
    """``breakdown.py``'s row dimension read from the eval row: the fault runs per onset phase, in
    the run's own order (healthy and benign runs under "-"), every phase present given its row."""
    from benchmarks.corpus.breakdown import format_tables

    def pair(truth, phase, detected):
        row = {"run": f"r-{truth}-{phase}", "truth": truth, "onset_phase": phase, "detected": detected}
        row.update(class_right=detected, false_alarm=False, verdict=truth if detected else "healthy")
        params = {"framework": "hf", "save_every": 50, "warmup": 0, "naming": "llama"}
        return row, {
            "fault": "none" if truth == "healthy" else "high-lr",
            "params": params,
            "steps_planned": 1000,
        }

    pairs = [
        pair("healthy", None, None),
        pair("high_lr", "examined", True),
        pair("high_lr", "before the run settled", False),
        pair("high_lr", "before the run settled", True),
        pair("high_lr", "settled, not yet examined", True),
    ]
    text = format_tables(pairs)
    table = text[text.index("onset phase") :].splitlines()[1:5]
    phases = ["-", "before the run settled", "settled, not yet examined", "examined"]
    assert [line.split("  ")[0].strip() for line in table] == phases  # not the alphabet's order
    assert "1/2" in table[1] and "1/1" in table[2] and "1/1" in table[3]


def test_breakdown_gives_each_recipe_of_one_optimizer_its_own_row():
    """``optimizer`` pools a name's recipes; ``optimizer settings`` splits them by what truth.json
    records (LR, betas, eps, weight decay), so that ``lion99`` and ``lion98b95`` are read apart."""
    from benchmarks.corpus.breakdown import format_tables
    from benchmarks.corpus.recipes import OPTIMIZERS

    pairs = []
    for i, recipe in enumerate(("lion99", "lion98b95", "lion98b95")):
        spec = RunSpec(framework="plain", model="llama", **{**TINY, **OPTIMIZERS[recipe]})
        opt = {"name": spec.opt, "lr": spec.lr, "betas": list(spec.betas), "weight_decay": spec.wd}
        row = {"run": f"r{i}", "truth": "high_lr", "detected": i != 1, "class_right": i != 1}
        row.update(false_alarm=False, verdict="high_lr" if i != 1 else "healthy")
        pairs.append((row, {"fault": "high-lr", "params": {"optimizer": opt}, "steps_planned": 1000}))
    text = format_tables(pairs)
    pooled = text[text.index("optimizer ") :].splitlines()[1]
    assert pooled.split()[:4] == ["lion", "3", "3", "2/3"]
    rows = text[text.index("optimizer settings") :].splitlines()[1:3]
    assert [r.split("  ")[0] for r in rows] == [
        "lion lr 0.0003 betas 0.9/0.99 wd 1",
        "lion lr 0.001 betas 0.95/0.98 wd 0.3",
    ]
    assert rows[0].split()[7:10] == ["1", "1", "1/1"] and rows[1].split()[7:10] == ["2", "2", "1/2"]


def test_fall_margin_reads_a_fall_from_where_each_layer_stood_as_it_settled():
    """``benchmarks/corpus/fall_margin.py --reading settling`` (a reading measured, not a rule):
    each layer's median D2 entropy against the median it held from half its own settling step to
    that step, both included, less the highest over three checkpoints, read only after the
    settling; a layer with fewer than two values there is not read."""
    import numpy as np

    from benchmarks.corpus.fall_margin import settling_levels
    from ckptscan.judge import detect
    from ckptscan.store.timeline import Timeline
    from tests.test_detect import _fine_run

    steps, s = _fine_run(0)
    for name in ("attn.q.update_ratio", "attn.k.update_ratio"):  # layer 1's step size peaks later
        s[name][:, 1, :] *= np.minimum(1.0, steps / 300.0)[:, None]
    settled = detect.examined_from(Timeline.from_arrays(steps, s))[0]
    assert settled[0] < settled[1] < len(steps) - 20, settled
    ent = np.full((len(steps), 2), 0.9)  # before half the settling step: not part of the level
    for layer, k in enumerate(settled):
        window = (steps >= steps[k] / 2) & (steps <= steps[k])
        ent[window, layer] = np.linspace(0.5, 0.7, window.sum())  # median 0.6; not its first, last or max
        ent[k + 1 :, layer] = 0.6
    wear = int(np.searchsorted(steps, steps[settled[1]] + 60))  # both layers fall 0.25 from here
    ent[wear:] = 0.35
    ent[wear + 2, 0] = 0.5  # one checkpoint of layer 0 higher, the third of the three read at `wear`
    s["attn.D2.entropy2"] = np.repeat(ent[:, :, None], s["attn.D2.entropy2"].shape[2], axis=2)
    t = Timeline.from_arrays(steps, s)
    assert (detect.examined_from(t)[0] == settled).all()
    [(fall, need)] = settling_levels(t, persist=3)
    assert need == 2
    for layer, k in enumerate(settled):
        assert np.isnan(fall[: k + 1, layer]).all()  # nothing read up to the layer's own settling
        assert fall[k + 1, layer] == pytest.approx(0.0, abs=1e-6)  # read from the next checkpoint
    assert fall[wear, 1] == pytest.approx(0.25, abs=1e-6)
    assert fall[wear, 0] == pytest.approx(0.1, abs=1e-6)  # the least over three: 0.6 - 0.5
    assert fall[wear + 3, 0] == pytest.approx(0.25, abs=1e-6)
    # a layer with one value between half its settling step and its settling step is not read
    k = settled[1]
    window = (steps >= steps[k] / 2) & (steps < steps[k])
    s["attn.D2.entropy2"][window, 1] = np.nan
    t = Timeline.from_arrays(steps, s)
    assert (detect.examined_from(t)[0] == settled).all()
    [(fall, _)] = settling_levels(t, persist=3)
    assert np.isnan(fall[:, 1]).all() and fall[wear + 3, 0] == pytest.approx(0.25, abs=1e-6)


@pytest.mark.parametrize("opt", ["muon", "muon02"])
def test_muon_orthogonalises_the_hidden_matrices_and_adamw_moves_the_rest(opt, tmp_path):
    spec = RunSpec(framework="plain", model="llama", **{**TINY, "opt": opt})
    model = build_model(spec)
    optim = common.build_optimizer(model, spec)
    sched = common.build_scheduler(optim, spec)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids = torch.randint(
        0, model.config.vocab_size, (2, SEQ_LEN + 1), generator=torch.Generator().manual_seed(0)
    )
    _grads(model, ids)
    grad_q = model.model.layers[0].self_attn.q_proj.weight.grad.clone()
    optim.step()
    sched.step()
    moved = {n: p.detach() - before[n] for n, p in model.named_parameters()}
    # a hidden matrix's first Muon update is the orthogonalised gradient: its singular values
    # nearly equal (Newton-Schulz lands them in about 0.7-1.2; the few that are nearly 0 in the
    # gradient stay small, so the last 4 are left out), where the gradient's spread widely
    sv = torch.linalg.svdvals(moved["model.layers.0.self_attn.q_proj.weight"])[:-4]
    gsv = torch.linalg.svdvals(grad_q)[:-4]
    assert sv.max() / sv.min() < 2.0 and gsv.max() / gsv.min() > 10.0
    # ... scaled as its recipe says (64 x 64: Moonshot's 0.2 sqrt(64) at the AdamW LR, Keller
    # Jordan's 1 at 0.02), weight decay only in Moonshot's
    lr0 = common.lr_at(1, spec)
    scale = lr0 * 0.2 * 8 if opt == "muon" else common.MUON02_LR * lr0 / spec.lr
    assert 0.6 < sv.median() / scale < 1.3
    assert optim.muon.param_groups[0]["weight_decay"] == (spec.wd if opt == "muon" else 0.0)
    group, recorded = optim.muon.param_groups[0], common.muon_settings(spec)  # what truth.json says
    assert (group["initial_lr"], group["adjust_lr_fn"], group["weight_decay"]) == (
        recorded["lr"],
        recorded["adjust_lr_fn"],
        recorded["weight_decay"],
    )
    # the embeddings, LM head and norms follow AdamW: its first step moves each entry with a
    # gradient by the LR (times the warm-up's first factor); rows of tokens not in the batch only decay
    emb = moved["model.embed_tokens.weight"]
    hit = emb.abs() > lr0 / 2
    assert (hit.any(dim=1) == torch.isin(torch.arange(emb.shape[0]), ids[:, :-1])).all()
    assert hit.any() and torch.allclose(emb[hit].abs(), torch.full_like(emb[hit], lr0), rtol=0.02)
    head = moved["lm_head.weight"]
    close = ((head.abs() / lr0) - 1).abs() < 0.02  # all but the few whose gradient is near eps
    assert close.float().mean() > 0.99
    assert moved["model.norm.weight"].abs().max() > 0
    # one scheduler drives both: every group's LR is the planned LR of step 2, Muon's at its own scale
    muon_lr = spec.lr if opt == "muon" else common.MUON02_LR
    assert [g["lr"] for g in optim.muon.param_groups] == pytest.approx(
        [muon_lr * common.lr_at(2, spec) / spec.lr]
    )
    assert [g["lr"] for g in optim.adamw.param_groups] == pytest.approx([common.lr_at(2, spec)] * 2)
    # its state dict holds both optimizers' moments and loads without running a pickle
    torch.save(optim.state_dict(), tmp_path / "opt.pt")
    state = torch.load(tmp_path / "opt.pt", weights_only=True)
    assert set(state) == {"muon", "adamw"} and state["muon"]["state"] and state["adamw"]["state"]
    fresh = common.build_optimizer(build_model(spec), spec)
    fresh_sched = common.build_scheduler(fresh, spec)
    fresh.load_state_dict(state)
    assert fresh.muon.state_dict()["state"].keys() == optim.muon.state_dict()["state"].keys()
    for _ in range(3):  # ... and a scheduler still drives both after a load (Accelerate does one)
        fresh_sched.step()
    assert fresh.muon.param_groups[0]["lr"] == pytest.approx(muon_lr * common.lr_at(4, spec) / spec.lr)
    assert fresh.adamw.param_groups[0]["lr"] == pytest.approx(common.lr_at(4, spec))


def _steps_with_a_closure(optim, model, ids) -> None:
    """``optim.step(closure)`` (as Lightning steps) runs the closure once and returns its loss."""
    calls = []

    def closure():
        calls.append(1)
        optim.zero_grad()
        loss, _ = lm_loss(model, ids)
        loss.backward()
        return loss

    assert torch.isfinite(optim.step(closure)) and calls == [1]


@pytest.mark.parametrize("model", sorted(common.MODELS))
def test_muon_and_adamw_share_out_every_parameter_once_and_step_runs_the_closure(model):
    spec = RunSpec(framework="plain", model=model, kv_heads=_kv_heads(model), **{**TINY, "opt": "muon"})
    net = build_model(spec)
    optim = common.build_optimizer(net, spec)
    muon = [id(p) for g in optim.muon.param_groups for p in g["params"]]
    adamw = [id(p) for g in optim.adamw.param_groups for p in g["params"]]
    assert sorted(muon + adamw) == sorted(id(p) for p in net.parameters())
    names = {id(p): n for n, p in net.named_parameters()}
    tables = {id(m.weight) for m in net.modules() if isinstance(m, torch.nn.Embedding)}  # tokens, positions
    assert tables >= {id(net.get_input_embeddings().weight)}
    assert all(net.get_parameter(names[i]).dim() == 2 for i in muon)
    assert all(i not in tables and "lm_head" not in names[i] for i in muon)
    # every 2-D matrix but the embedding tables and the head is Muon's (the experts' fused 3-D
    # weights are not 2-D)
    assert {
        n for n, p in net.named_parameters() if p.dim() == 2 and id(p) not in tables and "lm_head" not in n
    } == {names[i] for i in muon}
    ids = torch.randint(
        0, net.config.vocab_size, (2, SEQ_LEN + 1), generator=torch.Generator().manual_seed(1)
    )
    _steps_with_a_closure(optim, net, ids)


@pytest.mark.parametrize("recipe", ["lion99", "lion98b95"])
def test_lion_moves_every_entry_by_the_lr_in_the_sign_of_its_interpolated_momentum(recipe, tmp_path):
    from benchmarks.corpus.recipes import OPTIMIZERS

    spec = RunSpec(framework="plain", model="mixtral", **{**TINY, **OPTIMIZERS[recipe]})
    model = build_model(spec)
    optim = common.build_optimizer(model, spec)
    sched = common.build_scheduler(optim, spec)
    b1, b2 = spec.betas
    decays = {id(p) for g in optim.param_groups if g["weight_decay"] == spec.wd > 0 for p in g["params"]}
    assert decays == {id(p) for p in model.parameters() if p.dim() >= 2}  # the 3-D experts too
    # the paper's update written out by hand, two steps (the second reads the momentum of the first)
    ref = {n: p.detach().clone() for n, p in model.named_parameters()}
    mom = {n: torch.zeros_like(p) for n, p in ref.items()}
    for step in (1, 2):
        ids = torch.randint(
            0, model.config.vocab_size, (2, SEQ_LEN + 1), generator=torch.Generator().manual_seed(step)
        )
        optim.zero_grad()
        _grads(model, ids)
        lr = common.lr_at(step, spec)
        assert [g["lr"] for g in optim.param_groups] == pytest.approx([lr, lr])
        for n, p in model.named_parameters():
            wd = spec.wd if id(p) in decays else 0.0
            g = p.grad
            ref[n] = ref[n] * (1 - lr * wd) - lr * torch.sign(b1 * mom[n] + (1 - b1) * g)
            mom[n] = b2 * mom[n] + (1 - b2) * g
        optim.step()
        sched.step()
        for n, p in model.named_parameters():
            assert torch.allclose(p.detach(), ref[n], atol=1e-7, rtol=0), n
    # the truth file records the recipe as the optimizer runs it
    truth = common.write_truth(tmp_path, spec, common.StepRecord(spec), [], {})
    assert truth["params"]["optimizer"] == {
        "name": "lion",
        "lr": spec.lr,
        "betas": list(spec.betas),
        "weight_decay": spec.wd,
    }
    # its state dict loads without running a pickle and holds the momentum the paper's loop holds
    torch.save(optim.state_dict(), tmp_path / "opt.pt")
    fresh = common.build_optimizer(build_model(spec), spec)
    fresh.load_state_dict(torch.load(tmp_path / "opt.pt", weights_only=True))
    names = {id(p): n for n, p in model.named_parameters()}
    for mine, theirs in zip(optim.param_groups, fresh.param_groups, strict=True):
        for p, q in zip(mine["params"], theirs["params"], strict=True):
            assert torch.allclose(fresh.state[q]["exp_avg"], mom[names[id(p)]], atol=1e-9, rtol=1e-5)
    # Lightning steps with a closure: it is run (under grad) before the gradients are read
    q = model.model.layers[0].self_attn.q_proj.weight
    before = q.detach().clone()
    optim.zero_grad()
    _steps_with_a_closure(optim, model, ids)
    assert (q.detach() - before).abs().max() > 0


ROPE = {  # what ckptscan must read from each family's config.json: RoPE or not, and on what share
    "phi3": 1.0,
    "gptneox": 0.25,
    "gpt2": None,  # learned positions
    "falcon": 1.0,
    "llama": 1.0,
}


@pytest.mark.parametrize("model", [*common.FUSED_QKV_MODELS, "llama"])
def test_ckptscan_splits_each_familys_attention_into_the_heads_the_library_computes(
    model, monkeypatch, tmp_path
):
    """What ckptscan reads as head j's query and key weights (the layout of the family, from the
    model's own tensor names and the config.json the training stacks write) and the RoPE it reads
    there are what transformers computes: at every position, the query and key the attention
    function receives equal those weights times the attention module's input, rotated as ckptscan
    rotates them.  A wrong split of a fused projection (per head where it is per group, q|k|v rows
    where it is q, k, v per head, a Conv1D left untransposed, heads permuted) or a wrong RoPE
    share fails here.  The projections' biases are zeroed: ckptscan reads the weights alone
    (docs/layouts.md)."""
    from transformers import AttentionInterface

    from ckptscan.layouts import resolve_layout
    from ckptscan.monitors.activations import RopeSpec, _project
    from tests.test_layouts import Recorder, infos_of

    kv = _kv_heads(model)
    spec = RunSpec(framework="plain", model=model, kv_heads=kv, **TINY)
    net = build_model(spec)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if name.endswith("bias") and any(k in name for k in ("qkv", "query_key_value", "c_attn")):
                p.zero_()
    net.config.save_pretrained(tmp_path)
    sd = {k: v.detach() for k, v in net.state_dict().items()}
    lay = resolve_layout(infos_of(sd), json.loads((tmp_path / "config.json").read_text()))
    rope = RopeSpec.of(lay.config)
    assert (rope.fraction if rope is not None else None) == ROPE[model]
    seen = {}

    def capture(module, query, key, value, *a, **kw):
        seen.setdefault(module.layer_idx, (query, key))
        return faults.lowprec_attention(module, query, key, value, *a, **kw)

    def keep_input(layer):
        def hook(mod, args, kwargs):
            seen.setdefault(("x", layer), args[0] if args else kwargs["hidden_states"])

        return hook

    for b in lay.attention:
        block = next(
            m
            for n, m in net.named_modules()
            if n.endswith(
                tuple(f"{b.layer}.{a}" for a in ("self_attn", "attention", "attn", "self_attention"))
            )
        )
        block.register_forward_pre_hook(keep_input(b.layer), with_kwargs=True)
    monkeypatch.setitem(AttentionInterface._global_mapping, faults.ATTN_IMPL, capture)
    ids = torch.randint(0, 256, (2, SEQ_LEN), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        net(input_ids=ids)
    assert [b.layer for b in lay.attention] == [0, 1]
    for b in lay.attention:
        assert (b.n_heads, b.n_kv_heads, b.head_dim) == (4, kv, 16)
        q_w, k_w = b.load(Recorder(sd))
        query, key = seen[b.layer]  # [batch, heads, T, h]
        for i, x in enumerate(seen[("x", b.layer)]):  # [T, d]
            on = rope if b.rope else None
            torch.testing.assert_close(query[i], _project(x, q_w, on), rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(key[i], _project(x, k_w, on), rtol=1e-4, atol=1e-5)


def test_the_corpus_attention_refuses_what_it_does_not_compute():
    """A sliding window shorter than the sequence (Phi-3 and Mixtral configs carry one) or a logit
    soft-cap would change eager attention: the corpus' kernel raises rather than compute without."""
    net = build_model(RunSpec(framework="plain", model="phi3", **TINY))
    ids = torch.randint(0, 256, (2, SEQ_LEN + 1), generator=torch.Generator().manual_seed(0))
    net.config.sliding_window = 8
    with pytest.raises(ValueError, match="sliding window"):
        lm_loss(net, ids)
    net.config.sliding_window = 4096  # longer than any corpus window: the same attention
    lm_loss(net, ids)


def test_breakdown_reads_heads_and_layers_from_every_familys_config():
    """GPT-2 names its sizes n_head and n_layer; GPT-2's and GPT-NeoX's configs name no KV heads
    (a KV head per query head), Falcon's names them num_kv_heads: each run's row is its model's."""
    from benchmarks.corpus.breakdown import DIMENSIONS

    for model, heads, layers in [
        ("gpt2", "4/4", 3),
        ("gptneox", "4/4", 2),
        ("falcon", "4/2", 2),
        ("llama", "4/2", 2),
    ]:
        cfg = common.model_config(model, layers, 4, _kv_heads(model)).to_diff_dict()
        truth = {"params": {"model": cfg}}
        assert (DIMENSIONS["heads"](truth), DIMENSIONS["layers"](truth)) == (heads, layers), model
    assert DIMENSIONS["heads"]({"params": {}}) == "4/2"  # a drill run: the drills' model


def test_fall_margin_lists_the_runs_of_one_fault_class_with_their_largest_fall(tmp_path, monkeypatch, capsys):
    from benchmarks.corpus import fall_margin

    rows = [
        {"run": "a-healthy", "truth": "healthy", "verdict": "healthy", "onset": None},
        {"run": "a-lowprec", "truth": "lowprec_attention", "verdict": "healthy", "onset": 300},
        {"run": "a-combined", "truth": "combined", "verdict": "high_lr", "onset": 300},
        {"run": "b-lowprec", "truth": "lowprec_attention", "verdict": "lowprec_attention", "onset": 500},
    ]
    (tmp_path / "eval.json").write_text(json.dumps({"rows": rows}))
    falls = {
        "a-healthy": (0.05, 700),
        "a-lowprec": (0.094, 1460),
        "a-combined": (0.2, 400),
        "b-lowprec": (-math.inf, None),
    }
    monkeypatch.setattr("ckptscan.api.load_result", lambda path: Path(path).name)
    seen = []

    def largest(result, since=None, reading="window"):
        seen.append((result, since, reading))
        return falls[result]

    monkeypatch.setattr(fall_margin, "largest_fall", largest)
    assert (
        fall_margin.main(["--ana", str(tmp_path), "--reading", "high", "--fault", "lowprec_attention"]) == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [
        "a-lowprec: healthy, largest fall 0.094 (step 1460)",
        "b-lowprec: lowprec_attention, largest fall none read",
    ]
    assert "largest fall: 0.050 (a-healthy, step 700)" in out[2]
    assert "lowprec_attention runs read: 2; reaching 0.12 at/after the onset: 0" in out
    assert "combined runs read: 1; reaching 0.12 at/after the onset: 1" in out
    assert ("a-lowprec", 300, "high") in seen and (
        "a-healthy",
        None,
        "high",
    ) in seen  # fault runs from their onset
