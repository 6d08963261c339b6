"""The monitor registry: every timeline series ckptscan computes, by name.

A monitor is a pure function (tensors in, numbers out) in one of this package's modules; this file
only says what each series *is* so that the timeline, detection and reports can pick it up by name.

``scope``: "head" series are [layers, heads]; "layer" series are [layers, 1].
``kind``: "single" is computed from one checkpoint; "pair" from a checkpoint and the previous one
(undefined, NaN, at the first analysed checkpoint).
``direction``: which deviation from the baseline is anomalous for detection: "down", "up" or "both".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MonitorSpec:
    name: str
    family: str  # "attention" | "router" | "numerics" | "act_attention" | "act_router"
    scope: str  # "head" | "layer"
    kind: str  # "single" | "pair"
    direction: str  # "down" | "up" | "both"
    description: str


REGISTRY: dict[str, MonitorSpec] = {}


def register(name, family, scope, kind, direction, description) -> MonitorSpec:
    if name in REGISTRY:
        raise ValueError(f"monitor {name!r} registered twice")
    spec = MonitorSpec(name, family, scope, kind, direction, description)
    REGISTRY[name] = spec
    return spec


def spec(name: str) -> MonitorSpec:
    """The spec of a monitor; block-prefixed names (``attn_rope.M.entropy2``) map to their base."""
    if name in REGISTRY:
        return REGISTRY[name]
    block, _, rest = name.partition(".")
    base = "attn." + rest
    if block.startswith("attn") and base in REGISTRY:
        return REGISTRY[base]
    raise KeyError(name)


# --- attention, weight side (monitors/attention.py) -------------------------------------------
register("attn.M.entropy1", "attention", "head", "single", "both", "spectral entropy (alpha=1) of M_j = Wq_j^T Wk_g, / log h")
register("attn.M.entropy2", "attention", "head", "single", "both", "spectral entropy (alpha=2) of M_j, / log h")
register("attn.M.stable_rank", "attention", "head", "single", "both", "stable rank of M_j")
register("attn.M.spectral_norm", "attention", "head", "single", "up", "spectral norm of M_j (logit growth)")
register("attn.D2.entropy1", "attention", "head", "pair", "down", "spectral entropy (alpha=1) of D2 = dWq^T Wk + Wq^T dWk, / log 2h")
register("attn.D2.entropy2", "attention", "head", "pair", "down", "spectral entropy (alpha=2) of D2, / log 2h (the paper's monitor)")
register("attn.D2.stable_rank", "attention", "head", "pair", "down", "stable rank of D2")
register("attn.D2.fro", "attention", "head", "pair", "up", "Frobenius norm of D2")
register("attn.D3.fro", "attention", "head", "pair", "up", "Frobenius norm of D3 = dWq^T dWk")
register("attn.D3_over_D2", "attention", "head", "pair", "up", "||D3||_F / ||D2||_F")
register("attn.q.update_ratio", "attention", "head", "pair", "up", "||dWq_j||_F / ||Wq_j||_F")
register("attn.k.update_ratio", "attention", "head", "pair", "up", "||dWk_g||_F / ||Wk_g||_F (for the kv head of query head j)")

# --- router, weight side (monitors/router.py) --------------------------------------------------
register("router.similarity", "router", "layer", "single", "up", "mean pairwise cosine of router rows")
register("router.centered_max_ratio", "router", "layer", "single", "up", "max_e ||w_e - w_bar|| / ||w_bar||")
register("router.centered_cond", "router", "layer", "single", "up", "condition number of W_r - 1 w_bar^T (over its E-1 directions)")
register("router.W.entropy1", "router", "layer", "single", "both", "spectral entropy (alpha=1) of W_r, / log E")
register("router.W.entropy2", "router", "layer", "single", "both", "spectral entropy (alpha=2) of W_r, / log E")
register("router.W.stable_rank", "router", "layer", "single", "both", "stable rank of W_r")
register("router.dW.entropy2", "router", "layer", "pair", "down", "spectral entropy (alpha=2) of dW_r, / log E")
register("router.dW.stable_rank", "router", "layer", "pair", "down", "stable rank of dW_r")
register("router.update_ratio", "router", "layer", "pair", "up", "||dW_r||_F / ||W_r||_F")

# --- numerics (monitors/numerics.py) -----------------------------------------------------------
register("numerics.nonfinite", "numerics", "layer", "single", "up", "count of NaN/Inf values in the layer's q, k and router tensors")

# --- activation side (monitors/activations.py registers the act.* series) ----------------------
from ckptscan.monitors import activations as _activations  # noqa: F401
