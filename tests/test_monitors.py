"""Weight-side monitors against the slow reference (materialised d x d matrices, full SVD)."""

import numpy as np
import pytest
import torch

from ckptscan.monitors import attention, router
from ckptscan.monitors.attention import Grams
from ckptscan.monitors.linalg import (
    lowrank_sq_singular_values,
    psd_product_eigvals,
    spectral_entropy,
    stable_rank,
)
from tests.reference import attention_reference, entropy_from_sv, router_reference, sv


def _weights(H, G, h, d, dtype, seed=0, scale=1e-2, lowrank_update=False):
    g = torch.Generator().manual_seed(seed)
    wq0 = torch.randn(H, h, d, generator=g, dtype=torch.float64)
    wk0 = torch.randn(G, h, d, generator=g, dtype=torch.float64)
    if lowrank_update:  # a rank-one update shared by all heads: the low-precision signature
        u = torch.randn(h, 1, generator=g, dtype=torch.float64)
        v = torch.randn(1, d, generator=g, dtype=torch.float64)
        dq = scale * (u @ v).expand(H, h, d)
    else:
        dq = scale * torch.randn(H, h, d, generator=g, dtype=torch.float64)
    dk = scale * torch.randn(G, h, d, generator=g, dtype=torch.float64)
    return [t.to(dtype) for t in (wq0, wk0, wq0 + dq, wk0 + dk)]


def _check(got: dict, ref: dict, rtol: float, atol: float = 0.0):
    assert set(ref) <= set(got), set(ref) - set(got)
    for k, r in ref.items():
        np.testing.assert_allclose(got[k].double().numpy(), r, rtol=rtol, atol=atol, err_msg=k)


@pytest.mark.parametrize("dtype,rtol", [(torch.float64, 1e-8), (torch.float32, 1e-4)])
@pytest.mark.parametrize("shape", [(4, 2, 8, 48), (6, 6, 4, 20), (4, 1, 8, 40)])  # GQA, MHA, MQA
def test_attention_monitors_match_full_svd(dtype, rtol, shape):
    H, G, h, d = shape
    wq0, wk0, wq1, wk1 = _weights(H, G, h, d, dtype)
    kv = torch.arange(H) // (H // G)
    got = attention.single_monitors(Grams.of(wq1, wk1), kv)
    pair, g1 = attention.pair_monitors(wq0, wk0, wq1, wk1, kv, Grams.of(wq0, wk0))
    got.update(pair)
    # the Grams of t derived from those of t-1 and the increment blocks equal the direct ones
    direct = Grams.of(wq1, wk1)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for a, b in ((g1.q, direct.q), (g1.k, direct.k)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=tol, atol=tol * b.abs().max().item())
    ref = attention_reference(wq0.double(), wk0.double(), wq1.double(), wk1.double())
    _check(got, ref, rtol)


@pytest.mark.parametrize("dtype,rtol", [(torch.float64, 1e-8), (torch.float32, 1e-4)])
def test_low_rank_update_collapses_d2_entropy_and_matches_reference(dtype, rtol):
    H, G, h, d = 4, 2, 8, 64
    full = _weights(H, G, h, d, dtype, seed=1)
    low = _weights(H, G, h, d, dtype, seed=1, lowrank_update=True)
    kv = torch.arange(H) // 2
    e_full = attention.pair_monitors(*full, kv)[0]["D2.entropy2"]
    got = attention.pair_monitors(*low, kv)[0]
    ref = attention_reference(*(t.double() for t in low))
    _check(got, {k: v for k, v in ref.items() if k.startswith("D")}, rtol)
    assert (got["D2.entropy2"] < e_full - 0.1).all()


def test_bf16_weights_give_reference_values_within_float32_tolerance():
    H, G, h, d = 4, 2, 16, 64
    wq0, wk0, wq1, wk1 = (t.to(torch.bfloat16) for t in _weights(H, G, h, d, torch.float32, scale=5e-2))
    f32 = [t.float() for t in (wq0, wk0, wq1, wk1)]
    kv = torch.arange(H) // 2
    got = attention.pair_monitors(*f32, kv)[0]
    ref = attention_reference(*(t.double() for t in f32))
    _check(got, {k: v for k, v in ref.items() if k.startswith(("D", "q.", "k."))}, 1e-4)


def test_zero_update_gives_nan_entropy_not_a_crash():
    H, G, h, d = 2, 1, 4, 16
    wq0, wk0, _, _ = _weights(H, G, h, d, torch.float32)
    got, _ = attention.pair_monitors(wq0, wk0, wq0.clone(), wk0.clone(), torch.zeros(H, dtype=torch.long))
    assert torch.isnan(got["D2.entropy2"]).all()
    assert (got["D2.fro"] == 0).all() and (got["q.update_ratio"] == 0).all()


def test_zero_weights_single_monitors_are_nan_not_crash():
    z = torch.zeros(2, 4, 16)
    got = attention.single_monitors(Grams.of(z, z[:1]), torch.zeros(2, dtype=torch.long))
    assert torch.isnan(got["M.entropy2"]).all()
    assert (got["M.spectral_norm"] == 0).all()


def test_lowrank_sq_singular_values_matches_svd():
    g = torch.Generator().manual_seed(3)
    a = torch.randn(3, 50, 6, generator=g, dtype=torch.float64)
    b = torch.randn(3, 50, 6, generator=g, dtype=torch.float64)
    got = lowrank_sq_singular_values(a, b)
    for i in range(3):
        ref = sv((a[i] @ b[i].T).numpy())[:6] ** 2
        np.testing.assert_allclose(got[i].numpy(), ref, rtol=1e-9)


def test_psd_product_eigvals_rank_deficient_falls_back():
    """A Gram with zero columns (a zero update) cannot be Cholesky-factored; the fallback must agree."""
    g = torch.Generator().manual_seed(4)
    a = torch.cat(
        [torch.randn(30, 2, generator=g, dtype=torch.float64), torch.zeros(30, 3, dtype=torch.float64)], 1
    )
    b = torch.randn(30, 5, generator=g, dtype=torch.float64)
    got = psd_product_eigvals(a.T @ a, b.T @ b)
    ref = sv(a.numpy() @ b.numpy().T)[:5] ** 2
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-8, atol=1e-10 * ref[0])


def test_entropy_edge_cases():
    flat = torch.ones(1, 8, dtype=torch.float64)
    one = torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64)
    assert spectral_entropy(flat, 2.0).item() == pytest.approx(1.0)
    assert spectral_entropy(one, 1.0).item() == pytest.approx(0.0)
    assert stable_rank(flat).item() == pytest.approx(8.0)
    s = np.array([3.0, 2.0, 1.0, 0.5])
    assert spectral_entropy(torch.from_numpy(s[None] ** 2), 1.0).item() == pytest.approx(
        entropy_from_sv(s, 1, 4)
    )


@pytest.mark.parametrize("dtype,rtol", [(torch.float64, 1e-8), (torch.float32, 1e-4)])
def test_router_monitors_match_reference(dtype, rtol):
    g = torch.Generator().manual_seed(5)
    w0 = torch.randn(8, 40, generator=g, dtype=torch.float64) + 0.5
    w1 = w0 + 0.05 * torch.randn(8, 40, generator=g, dtype=torch.float64)
    got = router.single_monitors(w1.to(dtype))
    got.update(router.pair_monitors(w0.to(dtype), w1.to(dtype)))
    ref = router_reference(w0.to(dtype).double().numpy(), w1.to(dtype).double().numpy())
    for k, r in ref.items():
        assert got[k].item() == pytest.approx(r, rel=rtol), k


def test_grams_carried_over_many_checkpoints_do_not_drift():
    """Fifty increments later, the Grams derived step by step still equal the direct ones."""
    H, G, h, d = 4, 2, 8, 64
    g = torch.Generator().manual_seed(7)
    wq = torch.randn(H, h, d, generator=g).to(torch.bfloat16).float()
    wk = torch.randn(G, h, d, generator=g).to(torch.bfloat16).float()
    kv = torch.arange(H) // 2
    grams = Grams.of(wq, wk)
    for _ in range(50):
        wq1 = (wq + 1e-2 * torch.randn(wq.shape, generator=g)).to(torch.bfloat16).float()
        wk1 = (wk + 1e-2 * torch.randn(wk.shape, generator=g)).to(torch.bfloat16).float()
        _, grams = attention.pair_monitors(wq, wk, wq1, wk1, kv, grams)
        wq, wk = wq1, wk1
    direct = Grams.of(wq.double(), wk.double())
    np.testing.assert_allclose(
        grams.q.numpy(), direct.q.numpy(), rtol=1e-5, atol=1e-5 * direct.q.abs().max().item()
    )
    np.testing.assert_allclose(
        grams.k.numpy(), direct.k.numpy(), rtol=1e-5, atol=1e-5 * direct.k.abs().max().item()
    )


def test_nonfinite_count_exact():
    from ckptscan.monitors.numerics import nonfinite_count

    t = torch.zeros(100)
    assert nonfinite_count(t) == 0
    t[3], t[7], t[9] = float("nan"), float("inf"), -float("inf")
    assert nonfinite_count(t, None, torch.ones(3)) == 3
    big = torch.full((10,), 3e38, dtype=torch.bfloat16)  # finite, but a float32 sum would overflow
    assert nonfinite_count(big.float()) == 0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_workspace_path_equals_plain_path_and_leaves_inputs_alone(dtype):
    """The pipeline's reused float64 buffers give the same monitors as fresh copies, across calls
    with different shapes, and never write into the caller's tensors."""
    ws = attention.Workspace()
    for shape in [(4, 2, 8, 48), (6, 6, 4, 20), (4, 2, 8, 48)]:
        H, G, h, d = shape
        ws_in = _weights(H, G, h, d, dtype, seed=d)
        keep = [t.clone() for t in ws_in]
        kv = torch.arange(H) // (H // G)
        plain, g_plain = attention.pair_monitors(*ws_in, kv)
        got, g_ws = attention.pair_monitors(*ws_in, kv, None, ws)
        for a, b in zip(ws_in, keep, strict=False):
            assert torch.equal(a, b)
        for k in plain:
            np.testing.assert_allclose(got[k].numpy(), plain[k].numpy(), rtol=1e-12, err_msg=k)
        np.testing.assert_allclose(g_ws.q.numpy(), g_plain.q.numpy(), rtol=1e-12)
        np.testing.assert_allclose(
            attention.Grams.of(ws_in[0], ws_in[1], ws).k.numpy(),
            attention.Grams.of(ws_in[0], ws_in[1]).k.numpy(),
            rtol=1e-12,
        )


def test_output_projection_update_ratio_matches_numpy_on_a_real_run(tmp_path):
    """``out.update_ratio`` in the timeline of a drill fixture equals ||W_t - W_{t-1}||_F / ||W_{t-1}||_F
    computed with numpy from the stored o_proj tensors, checkpoint by checkpoint."""
    from pathlib import Path

    from safetensors.torch import load_file

    from ckptscan.api import analyze
    from ckptscan.monitors import projection
    from ckptscan.store.timeline import Timeline

    run = Path(__file__).resolve().parents[1] / "fixtures" / "drills" / "highlr-moe"
    analyze(run, out_dir=tmp_path / "a", device="cpu", replay=False, steps="0:500")
    tl = Timeline.load(tmp_path / "a" / "timeline.h5")
    got = np.asarray(tl.get("out.update_ratio"))[:, :, 0]
    assert got.shape[1] == 2 and np.isnan(got[0]).all()

    def o_proj(step, layer):
        sd = load_file(run / f"checkpoint-{step}" / "model.safetensors")
        return sd[f"model.layers.{layer}.self_attn.o_proj.weight"].double().numpy()

    for i in range(1, len(tl.steps)):
        for layer in range(2):
            w0, w1 = o_proj(tl.steps[i - 1], layer), o_proj(tl.steps[i], layer)
            want = np.linalg.norm(w1 - w0) / np.linalg.norm(w0)
            assert got[i, layer] == pytest.approx(want, rel=1e-6)
    assert np.isnan(float(projection.update_ratio(torch.zeros(3, 3), torch.ones(3, 3))))
