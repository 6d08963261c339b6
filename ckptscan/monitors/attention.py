"""Attention monitors, weight side: the QK bilinear form M_j and its increment, per head.

Inputs follow the layout convention: ``wq`` [H, h, d], ``wk`` [G, h, d] (float32 or float64) and
``kv_index`` [H] (query head j reads key head kv_index[j]).  Nothing d x d is ever formed: every
spectrum comes from h x h or 2h x 2h Gram blocks (``ckptscan.monitors.linalg``):

    M_j  = Wq_j^T Wk_g                    sigma^2(M_j)  = eig(G(Wq_j) G(Wk_g))
    D2   = dWq^T Wk + Wq^T dWk = A B^T    A = [dWq^T, Wq^T],  B = [Wk^T, dWk^T]
                                          sigma^2(D2)   = eig(A^T A  B^T B), with 2h x 2h blocks
    D3   = dWq^T dWk                      ||D3||_F^2    = tr(G(dWq) G(dWk))

(W at t-1, dW = W(t) - W(t-1), G(X) = X X^T).  The Gram blocks and the small cores are float64.
float32 *cores* (Cholesky, eigvalsh) would move the spectral entropy of D2 a lot -- its core
mixes a weight block with an update block many decades smaller, and a Gram squares a spectrum's
dynamic range; float32 *products* with float64 cores would blur the low-precision signature (many
tiny singular values that float32 accumulation over d inflates).  So both stay float64 (what
float32 would cost, measured: docs/monitors.md).  dW is formed by subtracting the stored values in float64
(exact for bf16-stored weights, and for float32 values within 29 binades of each other), so no
block is ever recovered by cancellation.  The Grams of a checkpoint's own weights
are carried to the next pair (see ``pair_monitors``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ckptscan.monitors.linalg import gram, psd_product_eigvals, spectral_entropy, stable_rank
from ckptscan.monitors.registry import BlockStep, Detector, Family, Role, register_family, series


class Workspace:
    """Reusable float64 buffers for the copies of weight blocks that the Gram products need.

    A fresh float64 copy of a large block costs several times more than copying into memory that is
    already mapped (measured: docs/performance.md): the allocator hands large blocks back to the OS
    and every new one pays a page fault per page.  The pipeline keeps one
    Workspace per analysis (a few blocks' worth of memory); without one, a fresh float64 copy is made."""

    def __init__(self) -> None:
        self._bufs: dict[str, torch.Tensor] = {}

    def f64(self, x: torch.Tensor, slot: str) -> torch.Tensor:
        buf = self._bufs.get(slot)
        if buf is None or buf.shape != x.shape or buf.device != x.device:
            buf = self._bufs[slot] = torch.empty(x.shape, dtype=torch.float64, device=x.device)
        return buf.copy_(x)


def _f64(x: torch.Tensor, ws: Workspace | None, slot: str) -> torch.Tensor:
    """A float64 copy of ``x`` (never ``x`` itself, so callers may work on it in place)."""
    return ws.f64(x, slot) if ws is not None else x.to(torch.float64, copy=True)


@dataclass
class Grams:
    """G(Wq_j) [H, h, h] and G(Wk_g) [G, h, h] of one checkpoint's layer, in float64."""

    q: torch.Tensor
    k: torch.Tensor

    @classmethod
    def of(cls, wq: torch.Tensor, wk: torch.Tensor, ws: Workspace | None = None) -> Grams:
        return cls(gram(_f64(wq, ws, "q")), gram(_f64(wk, ws, "k")))


def single_monitors(g: Grams, kv_index: torch.Tensor) -> dict[str, torch.Tensor]:
    """Monitors of one checkpoint's M_j, each [H] (float64)."""
    s2 = psd_product_eigvals(g.q, g.k.index_select(0, kv_index.to(g.k.device)))
    return {
        "M.entropy1": spectral_entropy(s2, 1.0),
        "M.entropy2": spectral_entropy(s2, 2.0),
        "M.stable_rank": stable_rank(s2),
        "M.spectral_norm": s2[..., 0].sqrt(),
    }


def pair_monitors(
    wq0: torch.Tensor,
    wk0: torch.Tensor,
    wq1: torch.Tensor,
    wk1: torch.Tensor,
    kv_index: torch.Tensor,
    g0: Grams | None = None,
    ws: Workspace | None = None,
) -> tuple[dict[str, torch.Tensor], Grams]:
    """Monitors of the increment from checkpoint t-1 (``*0``) to t (``*1``), each [H] (float64),
    and the Grams of checkpoint t.

    ``g0``: the Grams of (wq0, wk0) if already computed (they are, for the previous checkpoint).
    The Grams of t are not recomputed from the weights: G(W + dW) = G(W) + C + C^T + G(dW) with
    C = dW W^T, blocks this function needs anyway.  That is a sum (no cancellation), accumulated in
    float64, so it saves a third of the matrix products at no cost in precision.
    """
    # differences of the stored values, taken in float64 (see the module docstring), products
    # in float64
    q0, k0 = _f64(wq0, ws, "q"), _f64(wk0, ws, "k")
    if g0 is None:
        g0 = Grams(gram(q0), gram(k0))
    # same-dtype in place on the copies (a mixed-dtype sub_ is several times slower)
    dq, dk = _f64(wq1, ws, "dq").sub_(q0), _f64(wk1, ws, "dk").sub_(k0)
    g_dq, c_q = gram(dq), dq @ q0.mT  # [H, h, h]: G(dWq_j), dWq_j Wq_j^T
    g_dk, c_k = gram(dk), k0 @ dk.mT  # [G, h, h]: G(dWk_g), Wk_g dWk_g^T
    # A^T A = G([dWq_j; Wq_j]) and B^T B = G([Wk_g; dWk_g]) assembled from the blocks
    ga = torch.cat([torch.cat([g_dq, c_q], -1), torch.cat([c_q.mT, g0.q], -1)], -2)
    gb_kv = torch.cat([torch.cat([g0.k, c_k], -1), torch.cat([c_k.mT, g_dk], -1)], -2)
    idx = kv_index.to(gb_kv.device)
    s2 = psd_product_eigvals(ga, gb_kv.index_select(0, idx))

    g_dk_q = g_dk.index_select(0, idx)
    d2_fro = s2.sum(-1).sqrt()
    d3_fro = (g_dq * g_dk_q).sum((-2, -1)).clamp_min(0).sqrt()  # tr(G_dq G_dk), symmetric
    q_ratio = (_trace(g_dq) / _trace(g0.q)).sqrt()
    k_ratio = (_trace(g_dk) / _trace(g0.k)).sqrt().index_select(0, idx)
    nan = torch.full_like(d2_fro, float("nan"))
    values = {
        "D2.entropy1": spectral_entropy(s2, 1.0),
        "D2.entropy2": spectral_entropy(s2, 2.0),
        "D2.stable_rank": stable_rank(s2),
        "D2.fro": d2_fro,
        "D3.fro": d3_fro,
        "D3_over_D2": torch.where(d2_fro > 0, d3_fro / d2_fro, nan),
        "q.update_ratio": q_ratio,
        "k.update_ratio": k_ratio,
    }
    g1 = Grams(g0.q + c_q + c_q.mT + g_dq, g0.k + c_k + c_k.mT + g_dk)
    # The carried sum is safe while W(t) is not much smaller than W(t-1); where a head shrank (a
    # zeroed or collapsing matrix) the sum would cancel and turn round-off into a spectrum, so the
    # Grams are taken from the weights instead.
    if not (_kept_scale(g0.q, g1.q) and _kept_scale(g0.k, g1.k)):
        g1 = Grams.of(wq1, wk1, ws)
    return values, g1


def _kept_scale(g0: torch.Tensor, g1: torch.Tensor, floor: float = 0.5) -> bool:
    """Every block's trace stayed above ``floor`` times its previous (positive) value."""
    t0, t1 = _trace(g0), _trace(g1)
    return bool(((t0 > 0) & (t1 >= floor * t0)).all())


def _trace(g: torch.Tensor) -> torch.Tensor:
    return g.double().diagonal(dim1=-2, dim2=-1).sum(-1)


# --- the family: registered series and their detectors ------------------------------------------


def _pair(step: BlockStep) -> dict[str, torch.Tensor]:
    assert step.before is not None
    (wq0, wk0), (wq1, wk1) = step.before, step.now
    values, step.keep = pair_monitors(wq0, wk0, wq1, wk1, step.block.kv_index(), step.carried, step.workspace)
    return values


def _single(step: BlockStep) -> dict[str, torch.Tensor]:
    if step.keep is None:  # no increment this time: the Grams from the weights
        wq, wk = step.now
        step.keep = Grams.of(wq, wk, step.workspace)
    return single_monitors(step.keep, step.block.kv_index())


def _heads(layout, prefix: str) -> int:
    return max((b.n_heads for b in layout.attention if b.name == prefix), default=1)


FAMILY = register_family(
    Family(
        name="attention",
        blocks=lambda layout: layout.attention,
        load=lambda block, read: block.load(read),
        prefix=lambda block: block.name,
        single=_single,
        pair=_pair,
        columns=_heads,
        series=series(
            "attention",
            "head",
            "attn",
            [
                ("M.entropy1", "single", "both", "spectral entropy (alpha=1) of M_j = Wq_j^T Wk_g, / log h"),
                ("M.entropy2", "single", "both", "spectral entropy (alpha=2) of M_j, / log h"),
                ("M.stable_rank", "single", "both", "stable rank of M_j"),
                ("M.spectral_norm", "single", "up", "spectral norm of M_j (logit growth)"),
                (
                    "D2.entropy1",
                    "pair",
                    "down",
                    "spectral entropy (alpha=1) of D2 = dWq^T Wk + Wq^T dWk, / log 2h",
                ),
                (
                    "D2.entropy2",
                    "pair",
                    "down",
                    "spectral entropy (alpha=2) of D2, / log 2h (the paper's monitor)",
                ),
                ("D2.stable_rank", "pair", "down", "stable rank of D2"),
                ("D2.fro", "pair", "up", "Frobenius norm of D2"),
                ("D3.fro", "pair", "up", "Frobenius norm of D3 = dWq^T dWk"),
                ("D3_over_D2", "pair", "up", "||D3||_F / ||D2||_F"),
                ("q.update_ratio", "pair", "up", "||dWq_j||_F / ||Wq_j||_F"),
                (
                    "k.update_ratio",
                    "pair",
                    "up",
                    "||dWk_g||_F / ||Wk_g||_F (for the kv head of query head j)",
                ),
            ],
        ),
        # Floors: a normalised entropy moving by 3 * 0.05 = 0.15 (of a [0, 1] range), or a log quantity
        # growing by 3 * 0.05 = 0.15 (16 %) per checkpoint, three checkpoints in a row, is never noise
        # in a run that trains normally; below that, a run's short history cannot tell noise from signal.
        detectors=(
            Detector("attn.D2.entropy2", "level", False, True, 0.05, Role.STRUCTURE),
            Detector("attn.D2.entropy1", "level", False, True, 0.05, Role.STRUCTURE),
            Detector("attn.q.update_ratio", "rate", True, False, 0.05, Role.STEP_SIZE, "trend", broad=True),
            Detector("attn.k.update_ratio", "rate", True, False, 0.05, Role.STEP_SIZE, "trend", broad=True),
            # a jump of the step size that stays: the level against its own trend (floor: z 3 = x2.5)
            Detector("attn.q.update_ratio", "shift", True, False, 0.3, Role.STEP_SIZE, broad=True),
            Detector("attn.k.update_ratio", "shift", True, False, 0.3, Role.STEP_SIZE, broad=True),
            Detector("attn.D3_over_D2", "rate", True, False, 0.05, Role.SECOND_ORDER),
            Detector("attn.M.spectral_norm", "rate", True, False, 0.05, Role.LOGITS),
        ),
    )
)
