"""The replay-file contract (reader, errors, find_replay) and the ReplayRecorder round trip."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest
import torch
from torch import nn

from ckptscan.errors import OutputError, ReplayError, UsageError
from ckptscan.record import ReplayRecorder, find_modules, write_replay
from ckptscan.replay.contract import FORMAT, ReplayFile, find_replay

B, T, D, E = 2, 5, 8, 4


def _acts(seed=0, layers=(0, 1), router=(1,)):
    g = torch.Generator().manual_seed(seed)
    out = {(i, "attn_in"): torch.randn(B, T, D, generator=g) for i in layers}
    out.update({(i, "router_in"): torch.randn(B, T, D, generator=g) for i in router})
    return out


def _ids(seed=0):
    return torch.randint(0, 100, (B, T), generator=torch.Generator().manual_seed(seed))


def _write_raw(path, build, fmt=FORMAT, step=10):
    with h5py.File(path, "w") as f:
        if fmt is not None:
            f.attrs["format"] = fmt
        f.attrs["step"] = step
        build(f)
    return path


# ------------------------------------------------------------------------------------------------
# reader


def test_round_trip_float32(tmp_path):
    acts, ids = _acts(), _ids()
    path = write_replay(tmp_path / "r.h5", 42, acts, ids)
    with ReplayFile(path) as r:
        assert r.step == 42 and r.path == path
        assert r.layers() == [0, 1]
        assert np.array_equal(r.input_ids(), ids.numpy())
        r.check(D, n_layers=2, router_layers=[1])
        torch.testing.assert_close(r.attn_in(0), acts[(0, "attn_in")], rtol=0, atol=0)
        torch.testing.assert_close(r.router_in(1, expected_d=D), acts[(1, "router_in")], rtol=0, atol=0)
        torch.testing.assert_close(r.attn_in(1, seqs=slice(1, 2)), acts[(1, "attn_in")][1:2], rtol=0, atol=0)
        assert r.router_logits(1) is None
        assert r.check_tokens(ids) is True
    assert not [p for p in tmp_path.iterdir() if p.name != "r.h5"]  # no temporary left behind


@pytest.mark.parametrize("store", ["bfloat16", "float16"])
def test_low_precision_round_trip(tmp_path, store):
    acts = _acts()
    path = write_replay(tmp_path / "r.h5", 1, acts, store_dtype=store)
    with h5py.File(path) as f:
        ds = f["layers/0/attn_in"]
        if store == "bfloat16":
            assert ds.dtype == np.uint16 and ds.attrs["dtype"] == "bfloat16"
        else:
            assert ds.dtype == np.float16
    with ReplayFile(path) as r:
        got = r.attn_in(0)
    assert got.dtype == torch.float32
    expected = acts[(0, "attn_in")].to(getattr(torch, store)).float()
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert not torch.equal(got, acts[(0, "attn_in")])  # precision was really reduced


def test_bf16_written_by_hand_as_uint16(tmp_path):
    """A third-party writer: bf16 bits = the top 16 bits of float32 (exact for bf16 values)."""
    x = torch.randn(B, T, D).to(torch.bfloat16).float()
    bits = (x.numpy().view(np.uint32) >> 16).astype(np.uint16)

    def build(f):
        f.create_dataset("layers/0/attn_in", data=bits).attrs["dtype"] = "bfloat16"

    with ReplayFile(_write_raw(tmp_path / "r.h5", build)) as r:
        torch.testing.assert_close(r.attn_in(0), x, rtol=0, atol=0)


def test_not_hdf5_is_a_replay_error(tmp_path):
    path = tmp_path / "replay.h5"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(ReplayError, match="replay.h5.*not a readable HDF5"):
        ReplayFile(path)


def test_truncated_hdf5_is_a_replay_error(tmp_path):
    full = write_replay(tmp_path / "full.h5", 1, _acts())
    data = full.read_bytes()
    cut = tmp_path / "cut.h5"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ReplayError, match="cut.h5"), ReplayFile(cut) as r:
        for i in r.layers():
            r.attn_in(i)


@pytest.mark.parametrize("fmt", [None, "ckptscan-replay/2", "something"])
def test_wrong_format_attribute(tmp_path, fmt):
    path = _write_raw(
        tmp_path / "r.h5", lambda f: f.create_dataset("layers/0/attn_in", data=np.zeros((B, T, D))), fmt=fmt
    )
    with pytest.raises(ReplayError, match="format"):
        ReplayFile(path)


def test_wrong_ndim_names_the_dataset(tmp_path):
    path = _write_raw(
        tmp_path / "r.h5", lambda f: f.create_dataset("layers/3/attn_in", data=np.zeros((T, D)))
    )
    with ReplayFile(path) as r:
        with pytest.raises(ReplayError, match=r"r\.h5.*layers/3/attn_in.*shape"):
            r.attn_in(3)
        with pytest.raises(ReplayError, match="layers/3/attn_in"):
            r.check(D)


def test_hidden_size_mismatch(tmp_path):
    path = write_replay(tmp_path / "r.h5", 1, _acts())
    with ReplayFile(path) as r:
        with pytest.raises(ReplayError, match=r"layers/0/attn_in.*hidden size 16"):
            r.attn_in(0, expected_d=16)
        with pytest.raises(ReplayError, match="hidden size 16"):
            r.check(16)


def test_missing_layer_and_missing_router(tmp_path):
    path = write_replay(tmp_path / "r.h5", 1, _acts(layers=(0, 1), router=()))
    with ReplayFile(path) as r:
        with pytest.raises(ReplayError, match="layers/2/attn_in.*missing"):
            r.check(D, n_layers=3)
        with pytest.raises(ReplayError, match="layers/1/router_in.*missing"):
            r.check(D, n_layers=2, router_layers=[1])
        with pytest.raises(ReplayError, match="layers/7"):
            r.attn_in(7)
        with pytest.raises(ReplayError, match="layers/0/router_in.*missing"):
            r.router_in(0)


def test_inconsistent_batch_shapes(tmp_path):
    def build(f):
        f.create_dataset("input_ids", data=np.zeros((B, T), dtype=np.int64))
        f.create_dataset("layers/0/attn_in", data=np.zeros((B, T + 1, D), dtype=np.float32))

    with (
        ReplayFile(_write_raw(tmp_path / "r.h5", build)) as r,
        pytest.raises(ReplayError, match=r"layers/0/attn_in.*\[B, T\]"),
    ):
        r.attn_in(0)


def test_integer_activation_is_refused(tmp_path):
    path = _write_raw(
        tmp_path / "r.h5",
        lambda f: f.create_dataset("layers/0/attn_in", data=np.zeros((B, T, D), dtype=np.int32)),
    )
    with ReplayFile(path) as r, pytest.raises(ReplayError, match="dtype"):
        r.attn_in(0)


def test_other_tokens_are_refused(tmp_path):
    path = write_replay(tmp_path / "r.h5", 1, _acts(), _ids(0))
    with ReplayFile(path) as r:
        assert r.check_tokens(_ids(0))
        other = _ids(0).clone()
        other[1, 3] += 1
        with pytest.raises(ReplayError, match=r"input_ids.*sequence 1, position 3"):
            r.check_tokens(other)
        with pytest.raises(ReplayError, match="input_ids"):
            r.check_tokens(_ids(0)[:1])
    no_ids = write_replay(tmp_path / "n.h5", 1, _acts())
    with ReplayFile(no_ids) as r:
        assert r.input_ids() is None and r.check_tokens(_ids(0)) is False


def test_find_replay(tmp_path):
    run = tmp_path / "run"
    ckpt = run / "checkpoint-100"
    ckpt.mkdir(parents=True)
    assert find_replay(ckpt, 100, run) is None
    (ckpt / "replay.h5").write_bytes(b"x")
    assert find_replay(ckpt, 100, run) == ckpt / "replay.h5"
    (run / "replay").mkdir()
    (run / "replay" / "step_00000100.h5").write_bytes(b"x")
    assert find_replay(ckpt, 100, run, "replay/step_{step:08d}.h5") == run / "replay" / "step_00000100.h5"
    assert find_replay(ckpt, 200, run, "replay/step_{step:08d}.h5") is None
    assert (
        find_replay(ckpt, 100, run, str(run / "{name}" / "replay.h5")) == run / "checkpoint-100" / "replay.h5"
    )
    single = run / "model_100.safetensors"
    single.write_bytes(b"x")
    assert find_replay(single, 100, run) is None
    with pytest.raises(UsageError, match="pattern"):
        find_replay(ckpt, 100, run, "replay/{iteration}.h5")


# ------------------------------------------------------------------------------------------------
# recorder: a tiny plain-torch LLaMA-like model with HF module names


class Attn(nn.Module):
    def __init__(self, d, heads, h):
        super().__init__()
        self.q_proj = nn.Linear(d, heads * h, bias=False)
        self.k_proj = nn.Linear(d, heads * h, bias=False)
        self.v_proj = nn.Linear(d, heads * h, bias=False)
        self.o_proj = nn.Linear(heads * h, d, bias=False)
        self.heads, self.h = heads, h

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.h).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.heads, self.h).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.heads, self.h).transpose(1, 2)
        o = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


class DenseMLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = nn.Linear(d, 3), nn.Linear(d, 3), nn.Linear(3, d)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class MoE(nn.Module):
    """Qwen2-MoE style: tokens flattened to [B*T, d] before the ``gate`` linear."""

    def __init__(self, d, e):
        super().__init__()
        self.gate = nn.Linear(d, e, bias=False)
        self.experts = nn.ModuleList(nn.Linear(d, d) for _ in range(e))

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        p = torch.softmax(self.gate(flat), -1)
        out = sum(p[:, i : i + 1] * ex(flat) for i, ex in enumerate(self.experts))
        return out.view_as(x)


class Layer(nn.Module):
    def __init__(self, d, moe):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(d)
        self.self_attn = Attn(d, 2, 4)
        self.post_attention_layernorm = nn.LayerNorm(d)
        self.mlp = MoE(d, E) if moe else DenseMLP(d)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        x = x + self.drop(self.self_attn(self.input_layernorm(x)))
        return x + self.mlp(self.post_attention_layernorm(x))


class TinyModel(nn.Module):
    def __init__(self, moe_layers=(1,)):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(100, D)
        self.model = nn.Module()
        self.model.layers = nn.ModuleList(Layer(D, i in moe_layers) for i in range(3))

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.model.layers:
            x = layer(x)
        return x


def test_find_modules_uses_names_and_skips_dense_gate_proj():
    model = TinyModel(moe_layers=(1,))
    attn, router = find_modules(model)
    assert attn == {i: model.model.layers[i].self_attn.q_proj for i in range(3)}
    assert router == {1: model.model.layers[1].mlp.gate}  # gate_proj of dense layers is not a router


def test_mlp_gate_without_experts_is_not_a_router():
    model = TinyModel(moe_layers=(1,))
    del model.model.layers[1].mlp.experts
    assert find_modules(model)[1] == {}


def test_recorder_round_trip(tmp_path):
    model = TinyModel(moe_layers=(1,))
    model.train()
    model.model.layers[2].drop.eval()  # a module deliberately left in eval: must stay so
    ids = _ids(3)
    q_out, gate_out = {}, {}
    hooks = [
        model.model.layers[i].self_attn.q_proj.register_forward_hook(
            lambda m, a, o, i=i: q_out.__setitem__(i, o.detach().clone())
        )
        for i in range(3)
    ]
    hooks.append(
        model.model.layers[1].mlp.gate.register_forward_hook(
            lambda m, a, o: gate_out.__setitem__(1, o.detach().clone())
        )
    )

    path = tmp_path / "checkpoint-7" / "replay.h5"
    ReplayRecorder(model, ids).save(path, step=7)
    for h in hooks:
        h.remove()

    assert model.training and model.model.layers[0].drop.training and not model.model.layers[2].drop.training
    with ReplayFile(path) as r:
        assert r.step == 7 and r.layers() == [0, 1, 2]
        r.check(D, n_layers=3, router_layers=[1], n_experts=E)
        assert r.check_tokens(ids)
        for i in range(3):
            wq = model.model.layers[i].self_attn.q_proj.weight
            torch.testing.assert_close(r.attn_in(i) @ wq.detach().T, q_out[i])
        wr = model.model.layers[1].mlp.gate.weight.detach()
        torch.testing.assert_close(r.router_in(1) @ wr.T, gate_out[1].view(B, T, E))
        torch.testing.assert_close(r.router_logits(1), gate_out[1].view(B, T, E))
        assert not r.has(0, "router_in")
    # eval mode during the recording: dropout off, so a second recording is identical
    again = ReplayRecorder(model, ids).record()
    with ReplayFile(path) as r:
        torch.testing.assert_close(again[(2, "attn_in")], r.attn_in(2), rtol=0, atol=0)


def test_recorder_with_explicit_modules_and_custom_forward(tmp_path):
    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(100, D)
            self.blocks = nn.ModuleList(nn.Linear(D, D) for _ in range(2))  # names the table does not know

        def forward(self, ids, scale=1.0):
            x = self.emb(ids) * scale
            for blk in self.blocks:
                x = torch.tanh(blk(x))
            return x

    model = Plain()
    with pytest.raises(ValueError, match="attn_modules"):
        ReplayRecorder(model, _ids())
    rec = ReplayRecorder(
        model,
        _ids(),
        forward=lambda m, ids: m(ids, scale=2.0),
        attn_modules={0: model.blocks[0], 1: model.blocks[1]},
    )
    rec.save(tmp_path / "r.h5", 3)
    with ReplayFile(tmp_path / "r.h5") as r:
        torch.testing.assert_close(r.attn_in(0), model.emb(_ids()).detach() * 2.0)
        torch.testing.assert_close(r.attn_in(1), torch.tanh(model.blocks[0](r.attn_in(0))).detach())


def test_recorder_on_drill_model_with_flattened_router_input(tmp_path):
    from ckptscan.drills.model import TinyConfig, TinyLM

    torch.manual_seed(0)
    cfg = TinyConfig(
        n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, ffn=16, n_experts=4, vocab=64
    )
    model = TinyLM(cfg)
    ids = torch.randint(0, 64, (2, 6))
    caps = ReplayRecorder(model, ids).save(tmp_path / "r.h5", 0, write=False)
    assert not (tmp_path / "r.h5").exists()  # write=False: forward only
    assert sorted(caps) == [
        (0, "attn_in"),
        (0, "router_in"),
        (0, "router_logits"),
        (1, "attn_in"),
        (1, "router_in"),
        (1, "router_logits"),
    ]
    assert caps[(0, "router_in")].shape == (2, 6, 32)
    torch.testing.assert_close(
        caps[(0, "router_logits")],
        caps[(0, "router_in")] @ model.model.layers[0].mlp.router.weight.detach().T,
    )


def test_failed_write_leaves_no_file(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OutputError, match="r.h5: cannot write: disk full"):
        write_replay(tmp_path / "r.h5", 1, _acts())
    assert list(tmp_path.iterdir()) == []


def test_find_modules_torchtitan_names_and_fused_layernorm_refused():
    def block(moe):
        b = nn.Module()
        b.attention = nn.Module()
        b.attention.wq = nn.Linear(D, D)
        if moe:
            b.moe = nn.Module()
            b.moe.router = nn.Module()
            b.moe.router.gate = nn.Linear(D, E)
            b.moe.experts = nn.Linear(D, D)
        else:
            b.feed_forward = nn.Module()
            b.feed_forward.gate = nn.Linear(D, E)  # no experts anywhere above: a dense gating linear
        return b

    model = nn.Module()
    model.layers = nn.ModuleList([block(False), block(True)])
    attn, router = find_modules(model)
    assert attn == {0: model.layers[0].attention.wq, 1: model.layers[1].attention.wq}
    assert router == {1: model.layers[1].moe.router.gate}

    model.layers[0].attention.wq.layer_norm_weight = nn.Parameter(torch.ones(D))  # TE LayerNormLinear
    with pytest.raises(ValueError, match="fuse the layernorm"):
        ReplayRecorder(model, _ids())
