"""Spectra of low-rank products through small cores; spectral entropies and stable rank.

The central identity (docs/monitors.md): for A, B in R^{d x r} with r << d,

    sigma(A B^T)^2 = eig((A^T A)(B^T B)) = eig(F^T (B^T B) F),   F F^T = A^T A

(with A = Q R, A^T A = R^T R and A B^T = Q (R B^T): the orthonormal Q does not change singular
values).  That is two r x r Gram products of d x r matrices (GEMMs, O(d r^2)), a Cholesky factor
and one r x r eigvalsh, instead of forming the d x d product (O(d^2 r)) and taking its SVD
(O(d^3)).  Everything is batched over leading dimensions (heads, layers) and runs on whatever
device the inputs live on.

Precision: the Gram products and the cores are float64.  A Gram squares the dynamic range of a
spectrum: singular values at 1e-4 of the largest (common in the increments of trained weights)
become eigenvalues at 1e-8, below float32's resolution of the Gram's entries; float32 cores or
products measurably move the spectral entropy of D2 (the measurements: docs/monitors.md,
docs/performance.md).  The inputs themselves stay in their
stored precision until the product; increments
are differences of stored values (never Gram blocks recovered by cancellation).  Eigenvalues below
r * eps of the largest are round-off and clamped to 0.
"""

from __future__ import annotations

import math

import torch


def lowrank_sq_singular_values(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Squared singular values of ``a @ b.mT`` without forming it.

    ``a``: [..., n, r1], ``b``: [..., n, r2] with r1 == r2 = r.  Returns [..., r] (float64,
    descending, clamped at zero): the eigenvalues of (a^T a)(b^T b), two r x r Gram products
    (GEMMs) and one r x r eigen-decomposition, all in float64 (see the module docstring).
    """
    if a.shape[:-1] != b.shape[:-1]:
        raise ValueError(f"shape mismatch {tuple(a.shape)} vs {tuple(b.shape)}")
    a, b = a.double(), b.double()
    return psd_product_eigvals(a.mT @ a, b.mT @ b)


def gram_sq_singular_values(a: torch.Tensor) -> torch.Tensor:
    """Squared singular values of ``a`` ([..., m, n]) from its smaller Gram matrix (float64), descending."""
    a64 = a.to(torch.float64)
    g = a64 @ a64.mT if a.shape[-2] <= a.shape[-1] else a64.mT @ a64
    ev = torch.linalg.eigvalsh(0.5 * (g + g.mT)).flip(-1)
    return _clamp_floor(ev, a.dtype)


def _clamp_floor(ev: torch.Tensor, input_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Zero the eigenvalues that are round-off: negative, or below n * eps * max, where eps is the
    precision the inputs (Gram blocks) were computed in."""
    n = ev.shape[-1]
    eps = torch.finfo(
        input_dtype if input_dtype is not None and input_dtype.is_floating_point else ev.dtype
    ).eps
    top = ev[..., :1].clamp_min(0)
    floor = top * (n * eps)
    return torch.where(ev > floor, ev, torch.zeros((), dtype=ev.dtype, device=ev.device))


def spectral_entropy(sq_sv: torch.Tensor, alpha: float) -> torch.Tensor:
    """Normalised spectral entropy H / log r of the distribution p_i = s_i^alpha / sum s^alpha.

    ``sq_sv``: squared singular values [..., r] (so s^alpha = (s^2)^(alpha/2)).  r is the number of
    values given (the maximal rank of the matrix), so 1.0 means a flat spectrum over the full rank
    and 0 a rank-one matrix.  An all-zero spectrum (no update at all) gives NaN: there is no
    distribution to measure.
    """
    r = sq_sv.shape[-1]
    w = sq_sv.clamp_min(0) ** (alpha / 2.0)
    total = w.sum(-1, keepdim=True)
    p = w / total
    plogp = torch.where(p > 0, p * torch.log(p), torch.zeros((), dtype=p.dtype, device=p.device))
    h = -plogp.sum(-1)
    h = torch.where(total.squeeze(-1) > 0, h, torch.full_like(h, float("nan")))
    return h / math.log(r) if r > 1 else torch.zeros_like(h)


def stable_rank(sq_sv: torch.Tensor) -> torch.Tensor:
    """||A||_F^2 / ||A||_2^2 from squared singular values (NaN for a zero matrix)."""
    top = sq_sv.max(-1).values
    return torch.where(top > 0, sq_sv.sum(-1) / top, torch.full_like(top, float("nan")))


def psd_sqrt_factor(g: torch.Tensor) -> torch.Tensor:
    """F with F F^T = g for a (batched) symmetric PSD matrix, robust to singular g.

    Uses the eigen-decomposition (not Cholesky, which fails on rank-deficient Gram matrices such as
    a zero update or a zero-initialised weight).
    """
    # scale to unit diagonal first, so blocks of very different size (an update next to a weight)
    # keep their own relative precision
    dg = g.diagonal(dim1=-2, dim2=-1).clamp_min(0).sqrt()
    inv = torch.where(dg > 0, 1.0 / dg, torch.zeros_like(dg))
    gs = g * inv.unsqueeze(-1) * inv.unsqueeze(-2)
    ev, vec = torch.linalg.eigh(0.5 * (gs + gs.mT))
    return dg.unsqueeze(-1) * vec * ev.clamp_min(0).sqrt().unsqueeze(-2)


def psd_product_eigvals(ga: torch.Tensor, gb: torch.Tensor) -> torch.Tensor:
    """Eigenvalues of ``ga @ gb`` for symmetric PSD ``ga``, ``gb`` ([..., r, r]), descending, >= 0.

    If ga = A^T A and gb = B^T B, these are the squared singular values of A B^T: the r x r route to
    the spectrum of a d x d product of rank <= r.  Computed as eig(F^T gb F) with F F^T = ga.

    The core is computed in the inputs' precision (at least float32); ckptscan's monitors pass
    float64 Gram blocks, so their cores are float64.  Returned in float64.
    """
    core_dtype = torch.promote_types(torch.promote_types(ga.dtype, gb.dtype), torch.float32)
    # round-off floor: the precision ``ga`` was computed in (the core's is at least as fine)
    in_dtype = ga.dtype
    ga = ga.to(core_dtype)
    ga = 0.5 * (ga + ga.mT)
    # Cholesky where ga is positive definite (the usual case: full-rank weights), an
    # eigen-decomposition square root for the heads where it is not (zero or rank-deficient blocks).
    f, info = torch.linalg.cholesky_ex(ga)
    bad = info != 0
    if bool(bad.any()):
        f = f.clone()
        f[bad] = psd_sqrt_factor(ga[bad])
    core = f.mT @ gb.to(core_dtype) @ f
    ev = torch.linalg.eigvalsh(0.5 * (core + core.mT)).flip(-1)
    return _clamp_floor(ev.double(), in_dtype)


def gram(x: torch.Tensor) -> torch.Tensor:
    """x @ x^T over the last dimension (batched): the r x r Gram of r row vectors."""
    return x @ x.mT
