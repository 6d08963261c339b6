"""Layout resolution: tensor names (+ config) -> per-layer attention and router blocks.

``resolve_layout(infos, config, layout_file)`` is the only entry point the rest of ckptscan needs.
Known architectures are data in ``families.FAMILIES``; anything else is described by a user layout
file (docs/layouts.md).  Tensor-name knowledge lives in this package only.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import LayoutError
from ..readers.base import TensorInfo
from .base import AttnBlock, Layout, ModelConfig, ProjBlock, Read, RouterBlock
from .config import ConfigFacts, find_config, load_config_file, read_config
from .families import BY_NAME, FAMILIES, Family
from .resolve import Builder, Matches, NameIndex, match_family
from .userfile import UserLayout, load_layout_file, match_roles

__all__ = [
    "FAMILIES",
    "AttnBlock",
    "Family",
    "Layout",
    "ModelConfig",
    "ProjBlock",
    "Read",
    "RouterBlock",
    "find_config",
    "load_config_file",
    "load_layout_file",
    "read_config",
    "resolve_layout",
    "unknown_architecture_message",
]

_SAMPLE = 8


def resolve_layout(
    infos: dict[str, TensorInfo],
    config: dict | None,
    layout_file: Path | str | None = None,
    overrides: dict | None = None,
) -> Layout:
    """Resolve the layout of one checkpoint from its tensor headers, its config, an optional user
    layout file and ``overrides`` (canonical config keys from ``--heads``/``--kv-heads``, which win).
    Raises ``LayoutError`` (one line) when it cannot, or when shapes disagree."""
    user = load_layout_file(layout_file) if layout_file is not None else None
    merged = dict(config or {})
    if user is not None:
        merged.update(user.config)
    merged.update(overrides or {})
    facts = read_config(merged)

    matches: Matches | None
    if user is not None and user.roles:
        matches = _user_matches(user, infos)
        routing = user.options.get("routing")
    else:
        forced = user.family if user is not None else None
        if forced is not None and forced not in BY_NAME:
            assert user is not None  # forced comes from the layout file
            raise LayoutError(
                f"[model] family = {forced!r} is not a known family; known: {', '.join(BY_NAME)}", user.path
            )
        matches = match_family(NameIndex(infos), facts, forced)
        if matches is None:
            if forced is not None:
                assert user is not None  # forced comes from the layout file
                fam = BY_NAME[forced]
                raise LayoutError(
                    f"[model] family = {forced!r}, but no tensor matches its names "
                    f"({', '.join(t for ts in fam.roles.values() for t in ts[:1])[:200]})",
                    user.path,
                )
            raise LayoutError(unknown_architecture_message(infos, facts))
        routing = user.options.get("routing") if user is not None else None
    layout = Builder(infos, facts, matches).build(routing)
    if user is not None:
        layout.notes.append(f"layout file {user.path}")
    return layout


def _user_matches(user: UserLayout, infos: dict[str, TensorInfo]) -> Matches:
    roles = match_roles(user, list(infos))
    o = user.options
    if "qkv" in roles:
        attn = "qkv"
    elif "kv_a" in roles:
        attn = "mla"
    else:
        attn = "separate"
    fam = Family(
        name="layout-file",
        attn=attn,
        roles={},
        required=(),
        qkv_order=o.get("qkv_order"),
        transposed=o.get("transposed", False),
        routing=o.get("routing", "softmax_topk"),
        routing_with_bias=o.get("routing", "sigmoid_bias"),
        router_flat=o.get("router_flat", False),
        norm_offset=o.get("norm_offset", 0.0),
    )
    return Matches(fam, "", roles)


_LAYER0 = re.compile(r"(^|\.)0\.")


def unknown_architecture_message(infos: dict[str, TensorInfo], facts: ConfigFacts | None = None) -> str:
    """One line: what was seen (a few layer-0 matrices with shapes) and how to describe it."""
    mats = [i for i in infos.values() if len(i.shape) == 2]
    sample = [i for i in mats if _LAYER0.search(i.name)][:_SAMPLE] or mats[:_SAMPLE]
    if not sample:
        sample = list(infos.values())[:_SAMPLE]
    seen = ", ".join(f"{i.name} {list(i.shape)}" for i in sample)
    mt = f" (config model_type {facts.model_type!r})" if facts and facts.model_type else ""
    return (
        f"unknown architecture{mt}: no known layout matches these {len(infos)} tensors; "
        f"sample: {seen}; describe q/k (or qkv) and router names in a layout file and pass it with "
        f"--layout FILE (format and supported families: docs/layouts.md)"
    )
