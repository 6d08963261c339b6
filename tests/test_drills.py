"""Tests for ckptscan.drills: the fault-injection drills (tiny model, faults, on-disk run format)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors import safe_open

from ckptscan.drills import divergence_step, run_drill
from ckptscan.drills.cli import drill
from ckptscan.drills.model import LowPrecAttention, LowPrecFault, truncate_mantissa

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "drills"
# A very small drill: ~100 optimizer steps of a 2-layer, d=32 model.
SMALL = {
    "steps": 90,
    "save_every": 30,
    "d_model": 32,
    "n_heads": 4,
    "n_kv_heads": 2,
    "head_dim": 8,
    "ffn": 16,
    "batch_size": 4,
    "seq_len": 32,
    "replay_seq": 32,
    "warmup": 10,
    "onset": 30,
}


# --- the fault's maths, against slow references ---------------------------------------------------


def _trunc_ref(x: float, bits: int) -> float:
    """Round toward zero to ``bits`` explicit mantissa bits, via frexp (obviously correct, slow)."""
    if x == 0 or not math.isfinite(x):
        return x
    m, e = math.frexp(abs(x))  # |x| = m * 2**e, m in [0.5, 1)
    q = math.floor(m * 2 ** (bits + 1)) / 2 ** (bits + 1)
    return math.copysign(q * 2.0**e, x)


@pytest.mark.parametrize("bits", [0, 3, 7, 10])
def test_truncate_mantissa_matches_reference(bits):
    x = torch.randn(500) * torch.logspace(-6, 6, 500)
    got = truncate_mantissa(x, bits)
    want = torch.tensor([_trunc_ref(v, bits) for v in x.tolist()], dtype=torch.float32)
    assert torch.equal(got, want)
    assert (got.abs() <= x.abs()).all()  # toward zero: a biased error


def _ref_attention(q, k, v):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    t = q.shape[-2]
    s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def test_attention_backward_exact_without_fault_and_biased_in_dq_dk_only_with_it():
    g = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(2, 3, 12, 8, generator=g) for _ in range(4))
    grads = {}
    for name, fn in [
        ("ref", lambda a, b, c: _ref_attention(a, b, c)),
        ("off", lambda a, b, c: LowPrecAttention.apply(a, b, c, LowPrecFault(active=False))),
        ("on", lambda a, b, c: LowPrecAttention.apply(a, b, c, LowPrecFault(7, 300.0, True))),
    ]:
        qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))
        out = fn(qq, kk, vv)
        out.backward(do)
        grads[name] = (out.detach(), qq.grad, kk.grad, vv.grad)
    for a, b in zip(grads["ref"], grads["off"], strict=False):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads["on"][0], grads["ref"][0])  # forward untouched
    torch.testing.assert_close(grads["on"][3], grads["ref"][3])  # dV untouched
    assert not torch.allclose(grads["on"][1], grads["ref"][1], atol=1e-4)  # dQ biased
    assert not torch.allclose(grads["on"][2], grads["ref"][2], atol=1e-4)  # dK biased


def test_divergence_rule_against_hand_cases():
    steps = list(range(1, 201))
    flat = [2.0] * 200
    assert divergence_step(steps, flat) is None
    nan = flat[:]
    nan[120] = float("nan")
    assert divergence_step(steps, nan) == 121
    jump = [2.0] * 100 + [5.0] * 100  # EMA(0.9) crosses min + 1 when 3 * (1 - 0.9**n) > 1: n = 4
    assert divergence_step(steps, jump) == 104


# --- a small drill on disk -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("drills")
    a = run_drill(root / "a", naming="mixtral", dtype="bfloat16", shards=2, seed=3, **SMALL)
    b = run_drill(root / "b", naming="mixtral", dtype="bfloat16", shards=2, seed=3, **SMALL)
    return root, a, b


def _load_sharded(folder: Path) -> dict[str, torch.Tensor]:
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    out = {}
    for name, fname in index["weight_map"].items():
        with safe_open(folder / fname, "pt") as f:
            out[name] = f.get_tensor(name)
    return out


def test_small_drill_files_and_formats(small_runs):
    root, truth, _ = small_runs
    run = root / "a"
    assert json.loads((run / "truth.json").read_text()) == truth
    assert truth["fault"] == "none" and truth["divergence_step"] is None and truth["seed"] == 3
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["model_type"] == "mixtral" and cfg["architectures"] == ["MixtralForCausalLM"]
    assert (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]) == (
        32,
        4,
        2,
        8,
    )
    assert (cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["vocab_size"]) == (4, 2, 256)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 91))
    assert all({"loss", "grad_norm", "lr"} <= r.keys() for r in rows)
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.5  # it learns
    folders = sorted(p.name for p in run.iterdir() if p.is_dir())
    assert folders == ["checkpoint-30", "checkpoint-60", "checkpoint-90"] == sorted(truth["checkpoints"])
    ck = run / "checkpoint-60"
    assert json.loads((ck / "config.json").read_text()) == cfg
    w = _load_sharded(ck)
    assert (ck / "model-00001-of-00002.safetensors").exists() and (
        ck / "model-00002-of-00002.safetensors"
    ).exists()
    expected = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    for i in range(2):
        p = f"model.layers.{i}."
        expected |= {
            p + n
            for n in (
                "input_layernorm.weight",
                "post_attention_layernorm.weight",
                "self_attn.q_proj.weight",
                "self_attn.k_proj.weight",
                "self_attn.v_proj.weight",
                "self_attn.o_proj.weight",
                "block_sparse_moe.gate.weight",
            )
        }
        expected |= {
            f"{p}block_sparse_moe.experts.{e}.{m}.weight" for e in range(4) for m in ("w1", "w2", "w3")
        }
    assert set(w) == expected
    assert all(t.dtype == torch.bfloat16 for t in w.values())
    assert w["model.layers.0.self_attn.k_proj.weight"].shape == (16, 32)
    assert w["model.layers.1.block_sparse_moe.gate.weight"].shape == (4, 32)
    assert w["model.layers.0.block_sparse_moe.experts.3.w2.weight"].shape == (32, 16)


def test_replay_contract_and_matches_weights(small_runs):
    root, _, _ = small_runs
    ck = root / "a" / "checkpoint-90"
    w = {k: v.float() for k, v in _load_sharded(ck).items()}
    with h5py.File(ck / "replay.h5", "r") as f:
        assert f.attrs["format"] == "ckptscan-replay/1" and int(f.attrs["step"]) == 90
        ids = f["input_ids"][()]
        assert ids.shape == (2, 32) and np.issubdtype(ids.dtype, np.integer)
        for i in range(2):
            assert f[f"layers/{i}/attn_in"].shape == (2, 32, 32)
            assert f[f"layers/{i}/router_in"].shape == (2, 32, 32)
            assert f[f"layers/{i}/router_logits"].shape == (2, 32, 4)
            assert f[f"layers/{i}/attn_in"].dtype == np.float32
        # layer 0's attn_in is RMSNorm(embedding) -- recompute it from the saved (bf16) weights
        x = w["model.embed_tokens.weight"][torch.from_numpy(ids).long()]
        ref = (
            w["model.layers.0.input_layernorm.weight"]
            * x
            * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
        )
        torch.testing.assert_close(torch.from_numpy(f["layers/0/attn_in"][()]), ref, rtol=2e-2, atol=2e-2)
        logits = (
            torch.from_numpy(f["layers/1/router_in"][()]) @ w["model.layers.1.block_sparse_moe.gate.weight"].T
        )
        torch.testing.assert_close(
            torch.from_numpy(f["layers/1/router_logits"][()]), logits, rtol=3e-2, atol=3e-2
        )
    assert not list(ck.glob(".*tmp*"))  # atomic writes left nothing behind


def test_same_seed_same_weights(small_runs):
    root, a, b = small_runs
    wa, wb = _load_sharded(root / "a" / "checkpoint-90"), _load_sharded(root / "b" / "checkpoint-90")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    drop = ("elapsed_s",)
    assert {k: v for k, v in a.items() if k not in drop} == {k: v for k, v in b.items() if k not in drop}
    la = (root / "a" / "metrics.jsonl").read_text()
    assert la == (root / "b" / "metrics.jsonl").read_text()


def test_llama_naming_torch_format_and_folder_style(tmp_path):
    res = CliRunner().invoke(
        drill,
        [
            str(tmp_path / "r"),
            "--naming",
            "llama",
            "--format",
            "torch",
            "--folder-style",
            "iter",
            "--steps",
            "20",
            "--save-every",
            "10",
            "--d-model",
            "32",
            "--head-dim",
            "8",
            "--batch-size",
            "2",
            "--seq-len",
            "16",
            "--no-replay",
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    ck = tmp_path / "r" / "iter_0000020"
    sd = torch.load(ck / "pytorch_model.bin", weights_only=True)
    assert "model.layers.1.mlp.gate_proj.weight" in sd and "model.layers.0.mlp.down_proj.weight" in sd
    assert not (ck / "replay.h5").exists()
    assert json.loads((ck / "config.json").read_text())["model_type"] == "llama"
    bad = CliRunner().invoke(drill, [str(tmp_path / "r"), "--quiet", "--steps", "5"])
    assert bad.exit_code == 2  # refuses to overwrite a run


def test_qwen2_moe_names(tmp_path):
    run_drill(tmp_path / "q", naming="qwen2_moe", replay=False, **{**SMALL, "steps": 30})
    with safe_open(tmp_path / "q" / "checkpoint-30" / "model.safetensors", "pt") as f:
        names = set(f.keys())
    assert "model.layers.0.mlp.gate.weight" in names
    assert "model.layers.1.mlp.experts.2.up_proj.weight" in names
    assert json.loads((tmp_path / "q" / "config.json").read_text())["num_experts"] == 4


@pytest.mark.slow
def test_fault_diverges_after_onset_and_healthy_does_not(tmp_path):
    kw = {**SMALL, "steps": 200, "save_every": 10, "replay": False, "onset": 60}
    healthy = run_drill(tmp_path / "h", fault="none", **kw)
    # a steep LR growth (x e^0.2 per step) so that a 200-step drill is enough
    faulty = run_drill(tmp_path / "f", fault="high-lr", severity=200.0, nan_extra_saves=2, **kw)
    assert healthy["divergence_step"] is None and healthy["steps_run"] == 200
    assert faulty["divergence_step"] is not None and faulty["divergence_step"] > 60
    # before onset the two runs are the same run
    mh = (tmp_path / "h" / "metrics.jsonl").read_text().splitlines()[:59]
    mf = (tmp_path / "f" / "metrics.jsonl").read_text().splitlines()[:59]
    assert mh == mf
    # after the loss turns NaN the drill stops two saves later (the save that saw it, plus two)
    if faulty["nan_step"] is not None:
        after = [c for c in faulty["checkpoints"] if int(c.split("-")[1]) >= faulty["nan_step"]]
        assert len(after) == 3 and faulty["steps_run"] == int(after[-1].split("-")[1])


# --- the committed fixtures ------------------------------------------------------------------------


@pytest.mark.skipif(not FIXTURES.exists(), reason="fixtures/drills not generated")
def test_committed_fixture_truths():
    truths = {p.parent.name: json.loads(p.read_text()) for p in FIXTURES.glob("*/truth.json")}
    assert {"healthy-dense", "healthy-moe", "lowprec-moe", "highlr-moe", "combined-moe", "benign-moe"} <= set(
        truths
    )
    for name, t in truths.items():
        if t["fault"] == "none":
            assert t["divergence_step"] is None, name
        else:
            assert t["divergence_step"] is not None and t["divergence_step"] > t["onset_step"], name
        run = FIXTURES / name
        assert sorted(t["checkpoints"]) == sorted(p.name for p in run.iterdir() if p.is_dir())
