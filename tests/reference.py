"""Slow, obviously correct references: materialise the d x d matrices and take a full SVD (float64).

These live in the tests on purpose: the package never forms these matrices.
"""

from __future__ import annotations

import numpy as np


def entropy_from_sv(s: np.ndarray, alpha: float, r: int) -> float:
    """Normalised spectral entropy of the top-r singular values s (descending)."""
    s = np.asarray(s, dtype=np.float64)[:r]
    w = s**alpha
    if w.sum() == 0:
        return float("nan")
    p = w / w.sum()
    p = p[p > 0]
    return float(-(p * np.log(p)).sum() / np.log(r))


def sv(m: np.ndarray) -> np.ndarray:
    return np.linalg.svd(np.asarray(m, dtype=np.float64), compute_uv=False)


def attention_reference(wq0, wk0, wq1=None, wk1=None, kv_index=None) -> dict[str, np.ndarray]:
    """Per-head monitors from the materialised M_j, D2, D3 (all float64)."""
    wq0 = np.asarray(wq0, np.float64)
    wk0 = np.asarray(wk0, np.float64)
    H, h, _d = wq0.shape
    kv = np.arange(H) // (H // wk0.shape[0]) if kv_index is None else np.asarray(kv_index)
    out: dict[str, list] = {}

    def add(k, v):
        out.setdefault(k, []).append(v)

    for j in range(H):
        g = kv[j]
        src_q, src_k = (wq1, wk1) if wq1 is not None else (wq0, wk0)
        m = np.asarray(src_q, np.float64)[j].T @ np.asarray(src_k, np.float64)[g]  # d x d
        s = sv(m)
        add("M.entropy1", entropy_from_sv(s, 1, h))
        add("M.entropy2", entropy_from_sv(s, 2, h))
        add("M.stable_rank", (s**2).sum() / s[0] ** 2)
        add("M.spectral_norm", s[0])
        if wq1 is None:
            continue
        dq = np.asarray(wq1, np.float64)[j] - wq0[j]
        dk = np.asarray(wk1, np.float64)[g] - wk0[g]
        d2 = dq.T @ wk0[g] + wq0[j].T @ dk
        d3 = dq.T @ dk
        s2 = sv(d2)
        add("D2.entropy1", entropy_from_sv(s2, 1, 2 * h))
        add("D2.entropy2", entropy_from_sv(s2, 2, 2 * h))
        add("D2.stable_rank", (s2**2).sum() / s2[0] ** 2)
        add("D2.fro", np.linalg.norm(d2))
        add("D3.fro", np.linalg.norm(d3))
        add("D3_over_D2", np.linalg.norm(d3) / np.linalg.norm(d2))
        add("q.update_ratio", np.linalg.norm(dq) / np.linalg.norm(wq0[j]))
        add("k.update_ratio", np.linalg.norm(dk) / np.linalg.norm(wk0[g]))
    return {k: np.array(v) for k, v in out.items()}


def router_reference(w0, w1=None) -> dict[str, float]:
    w = np.asarray(w1 if w1 is not None else w0, np.float64)
    e = w.shape[0]
    unit = w / np.linalg.norm(w, axis=1, keepdims=True)
    cos = [unit[a] @ unit[b] for a in range(e) for b in range(a + 1, e)]
    wbar = w.mean(0)
    c = w - wbar
    cs = sv(c)[: e - 1]
    s = sv(w)
    out = {
        "similarity": float(np.mean(cos)),
        "centered_max_ratio": float(np.linalg.norm(c, axis=1).max() / np.linalg.norm(wbar)),
        "centered_cond": float(cs[0] / cs[-1]),
        "W.entropy1": entropy_from_sv(s, 1, e),
        "W.entropy2": entropy_from_sv(s, 2, e),
        "W.stable_rank": float((s**2).sum() / s[0] ** 2),
    }
    if w1 is not None:
        dw = w - np.asarray(w0, np.float64)
        ds = sv(dw)
        out["dW.entropy2"] = entropy_from_sv(ds, 2, e)
        out["dW.stable_rank"] = float((ds**2).sum() / ds[0] ** 2)
        out["update_ratio"] = float(np.linalg.norm(dw) / np.linalg.norm(np.asarray(w0, np.float64)))
    return out
