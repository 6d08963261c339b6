"""Read the architecture facts ckptscan needs from a config dict, whatever its dialect.

Checkpoints come with HF ``config.json`` files (LLaMA, Mixtral, Qwen, DeepSeek, GPT-2, NeoX, Falcon...),
Meta/Mistral ``params.json``, Megatron argument names, or OLMo-core's nested training config.  Each
fact has a short list of aliases, tried in order, so a new dialect is one more alias, not a branch.

Where the config comes from (``find_config``), first found wins: ``--config FILE``; ``config.json``
in the checkpoint folder; the checkpoint's own Lightning ``hyper_parameters``; ``config.json`` in the
run folder (a Lightning ``version_N``), the run root and up to ``CONFIG_PARENTS`` folders above it.
``--heads``/``--kv-heads`` (``model_overrides``) then override the head counts.

Values are looked up at the top level first, then breadth-first in nested dicts (``text_config`` of
multimodal HF models, OLMo-core's ``model.block.attention``...), skipping vision/audio sub-configs
so a vision tower's ``hidden_size`` never shadows the language model's.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..limits import JsonError, parse_json

CONFIG_PARENTS = 3  # folders above the run root searched for config.json
CONFIG_NAME = "config.json"

# fact -> aliases, first hit wins.  Keep canonical HF names first: a layout file's [model] table is
# merged into the config under these canonical names and must take precedence.
ALIASES: dict[str, tuple[str, ...]] = {
    "model_type": ("model_type",),
    "hidden_size": ("hidden_size", "n_embd", "d_model", "dim"),
    "n_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "n_heads": ("num_attention_heads", "n_head", "n_heads", "num_heads"),
    "n_kv_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads", "num_query_groups"),
    "head_dim": ("head_dim", "kv_channels", "head_size"),
    "rope_theta": ("rope_theta", "rotary_emb_base", "rotary_base", "rope_base"),
    "partial_rotary_factor": ("partial_rotary_factor", "rotary_pct", "rotary_percent"),
    "n_experts": (
        "num_local_experts",
        "num_experts",
        "n_routed_experts",
        "moe_num_experts",
        "num_moe_experts",
        "n_experts",
    ),
    "top_k": (
        "num_experts_per_tok",
        "moe_top_k",
        "experts_per_token",
        "moe_router_topk",
        "num_experts_per_token",
    ),
    # MLA (DeepSeek-V2/V3)
    "q_lora_rank": ("q_lora_rank",),
    "kv_lora_rank": ("kv_lora_rank",),
    "qk_nope_head_dim": ("qk_nope_head_dim",),
    "qk_rope_head_dim": ("qk_rope_head_dim",),
    "v_head_dim": ("v_head_dim",),
    # Falcon / BLOOM / GPT-BigCode
    "multi_query": ("multi_query",),
    "new_decoder_architecture": ("new_decoder_architecture",),
    "alibi": ("alibi",),
    "position_embedding_type": ("position_embedding_type",),
    "scoring_func": ("scoring_func", "moe_router_score_function", "gating_function"),
}

_SKIP_NESTED = ("vision", "visual", "audio", "image", "speech", "projector", "encoder_config", "quantization")
_NO_ROPE_POSITIONS = {"learned_absolute", "learned", "alibi", "none", "absolute"}


@dataclass
class ConfigFacts:
    """Facts found in a config (None where absent), plus the raw dict."""

    model_type: str | None = None
    architectures: tuple[str, ...] = ()
    hidden_size: int | None = None
    n_layers: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    head_dim: int | None = None
    rope_theta: float | None = None
    rope_scaling: dict | None = None
    partial_rotary_factor: float | None = None
    n_experts: int | None = None
    top_k: int | None = None
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    multi_query: bool | None = None
    new_decoder_architecture: bool | None = None
    alibi: bool | None = None
    position_embedding_type: str | None = None
    scoring_func: str | None = None
    uses_rope: bool | None = None  # only from a layout file's [model] table
    fp8_block: tuple[int, int] = (128, 128)
    raw: dict = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)  # values present but unusable, for the layout notes

    @property
    def hints(self) -> set[str]:
        """Lower-cased model_type and architectures, used to break ties between families."""
        out = {a.lower() for a in self.architectures}
        if self.model_type:
            out.add(self.model_type.lower())
        return out

    def no_rope_by_config(self) -> bool:
        """True when the config says positions are not rotary (ALiBi, learned absolute)."""
        if self.uses_rope is False or self.alibi:
            return True
        pet = (self.position_embedding_type or "").lower()
        return pet in _NO_ROPE_POSITIONS


def _walk(cfg: dict) -> list[dict]:
    """The config and its nested dicts, breadth-first, vision/audio sub-configs skipped."""
    out, queue = [], [cfg]
    while queue:
        d = queue.pop(0)
        out.append(d)
        for k, v in d.items():
            if isinstance(v, dict) and not any(s in k.lower() for s in _SKIP_NESTED):
                queue.append(v)
    return out


def _lookup(dicts: list[dict], aliases: tuple[str, ...]) -> Any:
    for d in dicts:
        for a in aliases:
            if a in d and d[a] is not None and not isinstance(d[a], dict):
                return d[a]
    return None


def as_int(v: Any) -> int | None:
    """``v`` as an int where it is a whole, finite number (an int, a numpy integer, a JSON 1000.0);
    None otherwise (a bool, a string, NaN)."""
    if isinstance(v, bool) or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    # NaN/Infinity are valid in Python's json (config.json may hold them): not a count
    if not math.isfinite(f):
        return None
    return int(f) if f == int(f) else None


def _as_float(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return None


def _in_range(facts: ConfigFacts, key: str, raw: Any, lo: float, hi: float) -> float | None:
    """``raw`` as a float when ``lo < value <= hi`` (finite), else None with a note: a NaN, negative or
    infinite RoPE base is not one, and the activation side must not compute with it."""
    v = _as_float(raw)
    if v is not None and math.isfinite(v) and lo < v <= hi:
        return v
    if raw is not None:
        facts.ignored.append(
            f"config {key} = {str(raw)[:40]} ignored (not in ({lo:g}, {hi:g}]); the default is used"
        )
    return None


def read_config(config: dict | None) -> ConfigFacts:
    """Parse a config dict of any supported dialect into ``ConfigFacts``."""
    if not config:
        return ConfigFacts(raw=dict(config or {}))
    dicts = _walk(config)
    get = {k: _lookup(dicts, a) for k, a in ALIASES.items()}
    facts = ConfigFacts(raw=dict(config))
    facts.model_type = str(get["model_type"]) if get["model_type"] is not None else None
    archs = config.get("architectures") or []
    facts.architectures = tuple(str(a) for a in archs) if isinstance(archs, list) else ()
    for k in (
        "hidden_size",
        "n_layers",
        "n_heads",
        "n_kv_heads",
        "head_dim",
        "n_experts",
        "top_k",
        "q_lora_rank",
        "kv_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "v_head_dim",
    ):
        v = as_int(get[k])
        setattr(facts, k, v if v is not None and v > 0 else None)  # 0 means "none" (q_lora_rank)
    if facts.top_k is None:
        # OLMo-core nests ``top_k`` in its router config; at the top level of an old HF config.json
        # ``top_k`` is the *generation* default (50), so only nested values count.
        facts.top_k = as_int(_lookup(dicts[1:], ("top_k",)))
    for k in ("multi_query", "new_decoder_architecture", "alibi"):
        v = get[k]
        setattr(facts, k, bool(v) if v is not None else None)
    for k in ("position_embedding_type", "scoring_func"):
        setattr(facts, k, str(get[k]) if get[k] is not None else None)

    # RoPE: newer transformers put rope_theta (and partial_rotary_factor) inside rope_parameters.
    rope_params = _lookup_dict(dicts, ("rope_parameters", "rope_scaling"))
    facts.rope_scaling = rope_params
    theta = get["rope_theta"]
    if theta is None and rope_params:
        theta = rope_params.get("rope_theta")
    facts.rope_theta = _in_range(facts, "rope_theta", theta, 0.0, math.inf)
    prf = get["partial_rotary_factor"]
    if prf is None and rope_params:
        prf = rope_params.get("partial_rotary_factor")
    facts.partial_rotary_factor = _in_range(facts, "partial_rotary_factor", prf, 0.0, 1.0)

    qc = config.get("quantization_config")
    if isinstance(qc, dict) and isinstance(qc.get("weight_block_size"), list | tuple):
        blk = [as_int(x) for x in qc["weight_block_size"]]
        if len(blk) == 2:
            b0, b1 = blk
            if b0 and b1:
                facts.fp8_block = (b0, b1)
    if "uses_rope" in config and isinstance(config["uses_rope"], bool):
        facts.uses_rope = config["uses_rope"]
    return facts


def _lookup_dict(dicts: list[dict], keys: tuple[str, ...]) -> dict | None:
    for d in dicts:
        for k in keys:
            if isinstance(d.get(k), dict):
                return dict(d[k])
    return None


def load_config_file(path: Path) -> dict:
    """A config.json as a dict; anything else is an InputError naming the file."""
    try:
        cfg = parse_json(Path(path).read_bytes())
    except OSError as e:
        raise InputError(f"invalid config.json: cannot read it ({e.strerror or e})", path) from None
    except JsonError as e:
        raise InputError(f"invalid config.json: the file {e}", path) from None
    if not isinstance(cfg, dict):
        raise InputError("invalid config.json: not a JSON object", path)
    return cfg


def _plain(v: Any) -> Any:
    """The JSON-like part of a hyper-parameter value (numbers, strings, nested dicts and lists)."""
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items() if _plain(x) is not None}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v if isinstance(v, (str, int, float, bool)) else None


def find_config(
    ckpt_path: Path,
    run_dir: Path,
    *,
    run_folder: Path | None = None,
    config_file: Path | None = None,
    hparams: Mapping | None = None,
) -> tuple[dict | None, str | None]:
    """The model config of one checkpoint and where it came from (module docstring), or (None, None).

    ``hparams`` are a Lightning checkpoint's ``hyper_parameters`` as loaded with ``weights_only``; only
    their plain values are used."""
    if config_file is not None:
        return load_config_file(config_file), str(config_file)
    ckpt_path = Path(ckpt_path)
    folder = ckpt_path if ckpt_path.is_dir() else ckpt_path.parent
    if (folder / CONFIG_NAME).is_file():
        return load_config_file(folder / CONFIG_NAME), str(folder / CONFIG_NAME)
    if (
        hparams and read_config(_plain(hparams)).n_heads is not None
    ):  # hyper-parameters that describe the model
        return _plain(hparams), f"{ckpt_path} (hyper_parameters)"
    run_dir = Path(os.path.abspath(run_dir))  # the parents as the user named them (no symlinks resolved)
    above = list(run_dir.parents)[:CONFIG_PARENTS]
    for cand in dict.fromkeys([*(p for p in (run_folder,) if p is not None), run_dir, *above]):
        if (cand / CONFIG_NAME).is_file():
            return load_config_file(cand / CONFIG_NAME), str(cand / CONFIG_NAME)
    return None, None
