"""User layout files (``--layout FILE``, TOML): head counts and/or tensor roles for anything else.

Format (documented in docs/layouts.md)::

    [model]            # optional: facts that override/complete config.json
    heads = 8
    kv_heads = 2
    head_dim = 16
    [roles]            # optional: regexes (one group = layer index) for each role
    q = 'net\\.blocks\\.(\\d+)\\.attn\\.q\\.weight'
    k = 'net\\.blocks\\.(\\d+)\\.attn\\.k\\.weight'
    router = 'net\\.blocks\\.(\\d+)\\.moe\\.gate\\.weight'
    routing = "softmax_topk"

Without ``[roles]`` the registry still detects the family; the file only supplies what config.json
lacks (Megatron and torchtitan checkpoints carry no config).  Every mistake is a ``LayoutError`` that
names the file and the key.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LayoutError
from .base import ROUTINGS
from .families import ATTN_ROLES, PROJ_ROLES, QKV_ORDERS, ROUTER_ROLES

# [model] key -> (canonical config.json key, type)
MODEL_KEYS: dict[str, tuple[str, type]] = {
    "heads": ("num_attention_heads", int),
    "kv_heads": ("num_key_value_heads", int),
    "head_dim": ("head_dim", int),
    "hidden_size": ("hidden_size", int),
    "n_layers": ("num_hidden_layers", int),
    "experts": ("num_local_experts", int),
    "top_k": ("num_experts_per_tok", int),
    "rope_theta": ("rope_theta", float),
    "partial_rotary_factor": ("partial_rotary_factor", float),
    "uses_rope": ("uses_rope", bool),
    "model_type": ("model_type", str),
    "q_lora_rank": ("q_lora_rank", int),
    "kv_lora_rank": ("kv_lora_rank", int),
    "qk_nope_head_dim": ("qk_nope_head_dim", int),
    "qk_rope_head_dim": ("qk_rope_head_dim", int),
    "v_head_dim": ("v_head_dim", int),
    "family": ("family", str),  # force a registry family (no [roles])
}
OPTION_KEYS = {
    "qkv_order": str,
    "transposed": bool,
    "routing": str,
    "router_flat": bool,
    "norm_offset": float,
}
REGEX_ROLES = ATTN_ROLES + ROUTER_ROLES + PROJ_ROLES


@dataclass
class UserLayout:
    path: Path
    config: dict = field(default_factory=dict)  # [model] as canonical config keys
    family: str | None = None
    roles: dict[str, re.Pattern] = field(default_factory=dict)
    options: dict = field(default_factory=dict)


def _check_type(path: Path, where: str, key: str, value, typ: type):
    ok = isinstance(value, typ) and not (typ is not bool and isinstance(value, bool))
    if typ is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if not ok:
        raise LayoutError(f"[{where}] {key} = {value!r}: expected {typ.__name__}", path)
    if typ is int and value <= 0:
        raise LayoutError(f"[{where}] {key} = {value}: must be a positive integer", path)
    return value


def load_layout_file(path: str | Path) -> UserLayout:
    """Parse and validate a layout file (syntax, keys, types, regexes); tensor matching happens later."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LayoutError("layout file not found", path) from None
    except (OSError, UnicodeDecodeError) as e:
        raise LayoutError(f"cannot read layout file: {e}", path) from None
    except tomllib.TOMLDecodeError as e:
        raise LayoutError(f"not valid TOML: {e}", path) from None
    unknown = set(data) - {"model", "roles"}
    if unknown:
        raise LayoutError(f"unknown table(s) {sorted(unknown)}; expected [model] and/or [roles]", path)
    out = UserLayout(path=path)
    model = data.get("model", {})
    roles = data.get("roles", {})
    if not isinstance(model, dict) or not isinstance(roles, dict):
        raise LayoutError("[model] and [roles] must be tables", path)
    for key, value in model.items():
        if key not in MODEL_KEYS:
            raise LayoutError(f"unknown key [model] {key}; allowed: {', '.join(MODEL_KEYS)}", path)
        cfg_key, typ = MODEL_KEYS[key]
        value = _check_type(path, "model", key, value, typ)
        if key == "family":
            out.family = value
        else:
            out.config[cfg_key] = value
    for key, value in roles.items():
        if key in OPTION_KEYS:
            out.options[key] = _check_type(path, "roles", key, value, OPTION_KEYS[key])
            continue
        if key not in REGEX_ROLES:
            allowed = ", ".join(REGEX_ROLES + tuple(OPTION_KEYS))
            raise LayoutError(f"unknown key [roles] {key}; allowed: {allowed}", path)
        if not isinstance(value, str):
            raise LayoutError(f"[roles] {key} must be a regex string, got {value!r}", path)
        try:
            pat = re.compile(value)
        except re.error as e:
            raise LayoutError(f"[roles] {key}: bad regex {value!r}: {e}", path) from None
        if pat.groups != 1 and "layer" not in pat.groupindex:
            raise LayoutError(
                f"[roles] {key}: regex {value!r} needs exactly one group capturing the "
                f"layer index, e.g. 'blocks\\.(\\d+)\\.attn\\.q\\.weight'",
                path,
            )
        out.roles[key] = pat
    _check_roles(out)
    return out


def _check_roles(u: UserLayout) -> None:
    r, o, path = u.roles, u.options, u.path
    if u.family and r:
        raise LayoutError("give either [model] family or [roles] regexes, not both", path)
    if "routing" in o and o["routing"] not in ROUTINGS:
        raise LayoutError(f"[roles] routing = {o['routing']!r}: expected one of {', '.join(ROUTINGS)}", path)
    if "qkv_order" in o and o["qkv_order"] not in QKV_ORDERS:
        raise LayoutError(
            f"[roles] qkv_order = {o['qkv_order']!r}: expected one of {', '.join(QKV_ORDERS)}", path
        )
    if not r:
        if set(o) - {"routing"}:
            raise LayoutError(f"[roles] options {sorted(o)} given without any role regex", path)
        return
    if "qkv" in r and ({"q", "k"} & set(r)):
        raise LayoutError("[roles]: give either qkv or q and k, not both", path)
    if "qkv" in r and "qkv_order" not in o:
        raise LayoutError('[roles] qkv needs qkv_order = "contiguous" | "per_head" | "per_group"', path)
    has_attn = "qkv" in r or {"q", "k"} <= set(r) or {"kv_a", "kv_b"} <= set(r)
    if not has_attn and ({"q", "k", "qkv"} & set(r)):
        raise LayoutError("[roles]: q needs k (or give qkv)", path)
    if not has_attn and "router" not in r:
        raise LayoutError("[roles]: give q and k, or qkv, and/or router", path)
    if "router_bias" in r and "router" not in r:
        raise LayoutError("[roles]: router_bias needs router", path)


def match_roles(u: UserLayout, names: list[str]) -> dict[str, dict[int, str]]:
    """role -> layer -> tensor name, by full match of the user's regexes.  A role matching nothing is
    an error (it is almost always a typo)."""
    out: dict[str, dict[int, str]] = {}
    for role, pat in u.roles.items():
        hits: dict[int, str] = {}
        for n in names:
            m = pat.fullmatch(n)
            if m:
                g = m.group("layer") if "layer" in pat.groupindex else m.group(1)
                try:
                    hits.setdefault(int(g), n)
                except (TypeError, ValueError):
                    raise LayoutError(
                        f"[roles] {role}: group matched {str(g)[:20]!r} in {n[:200]}, not a layer number",
                        u.path,
                    ) from None
        if not hits:
            raise LayoutError(
                f"[roles] {role} = {pat.pattern!r} matches no tensor (e.g. {', '.join(names[:3])})", u.path
            )
        out[role] = hits
    return out
