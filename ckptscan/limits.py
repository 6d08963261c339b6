"""Bounds on what evidence may make ckptscan do, checked before anything is parsed deeper or allocated.

Every reader of the run's files (checkpoint headers and indexes, config.json, training logs, the step
a checkpoint records, replay files) goes through these helpers, so a crafted or corrupt file meets
the same limits everywhere:

* ``parse_json``: JSON with its nesting depth and integer length bounded (Python's decoder recurses
  once per level and converts integers of any length), optionally refusing a key given twice;
* ``as_step``: a training step is a whole number in ``0 .. 2**63 - 1`` (the timeline stores int64);
* ``check_backed``: a loaded tensor holds the bytes its shape claims (no stride-0 or overlapping view
  that would expand to gigabytes when copied), on the CPU (not the ``meta`` device);
* ``memory_budget``: the bytes one checkpoint's analysis may need, refused beyond it.
"""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np
import torch

from ckptscan.errors import UsageError

MAX_JSON_DEPTH = 100  # real headers, indexes, configs and logs nest fewer than 10 levels
MAX_INT_DIGITS = 100  # an int64 has 19 digits; a longer integer is a corrupt or crafted file
MAX_STEP = 2**63 - 1  # the timeline stores steps as int64
BUDGET_ENV = "CKPTSCAN_MEMORY_BUDGET"  # bytes, with an optional K/M/G/T suffix
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}

# a JSON string (with its escapes): dropped before brackets are counted
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_OPEN = np.frombuffer(b"[{", np.uint8)
_CLOSE = np.frombuffer(b"]}", np.uint8)


class JsonError(ValueError):
    """Why a JSON text was refused, as a predicate for the caller's subject: ``f"header {err}"``."""


def parse_json(raw: bytes | str, *, unique_keys: bool = False) -> object:
    """``json.loads`` within the limits above.  ``unique_keys``: a key given twice in one object is an
    error (the safetensors reference refuses such headers) instead of the last one winning."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)
    depth = _depth(data)
    if depth > MAX_JSON_DEPTH:
        raise JsonError(f"is nested deeper than {MAX_JSON_DEPTH} levels ({depth})")
    hook = _unique_pairs if unique_keys else None
    try:
        return json.loads(data, parse_int=_bounded_int, object_pairs_hook=hook)
    except UnicodeDecodeError as err:
        raise JsonError(f"is not valid UTF-8 ({err.reason} at byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise JsonError(f"is not valid JSON ({err})") from None


def _depth(data: bytes) -> int:
    """The deepest bracket nesting outside strings (an upper bound when a string is unterminated)."""
    if data.count(b"[") + data.count(b"{") <= MAX_JSON_DEPTH:
        return 0  # cannot be deeper than its number of opening brackets: the common, fast case
    a = np.frombuffer(_JSON_STRING.sub(b'""', data), np.uint8)
    step = np.isin(a, _OPEN).astype(np.int64) - np.isin(a, _CLOSE)
    return int(np.cumsum(step).max(initial=0))


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise JsonError(f"holds an integer of {digits} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _unique_pairs(pairs: list[tuple[str, object]]) -> dict:
    out = {}
    for key, value in pairs:
        if key in out:
            raise JsonError(f"names {key!r} twice")
        out[key] = value
    return out


def as_step(value: object) -> int | None:
    """A training step as an int, or None unless ``value`` is a whole number in ``0 .. MAX_STEP``
    (a bool, NaN, 1e999 or a step beyond int64 is not a step)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value) or value != math.floor(value):
            return None
        value = int(value)
    value = int(value)
    return value if 0 <= value <= MAX_STEP else None


def check_backed(t: torch.Tensor) -> str | None:
    """Why a loaded tensor cannot be used as stored (one phrase), or None.  A tensor on the ``meta``
    device has no data; a view whose elements do not fit in its storage (stride 0, overlapping
    strides) would be materialised as its full shape: a small file could ask for gigabytes."""
    if t.device.type != "cpu":
        return f"is stored on the {t.device.type} device (no data)"
    need = t.numel() * t.element_size()
    have = t.untyped_storage().nbytes()
    if need > have:
        return (
            f"is a view of {t.numel()} elements over a storage of {have} bytes (stride 0 or overlapping "
            f"strides): refusing to expand it"
        )
    return None


def memory_budget() -> int:
    """Bytes one checkpoint's analysis may use: ``$CKPTSCAN_MEMORY_BUDGET`` (``8G``, ``512M``, bytes),
    else half of the machine's physical memory."""
    text = os.environ.get(BUDGET_ENV, "").strip()
    if text:
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)B?", text.upper())
        if not m:
            raise UsageError(f"{BUDGET_ENV}={text!r}: expected bytes, optionally with K, M, G or T (e.g. 8G)")
        return int(float(m.group(1)) * _UNITS[m.group(2)])
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):  # not POSIX: a fixed 8 GiB
        return 8 * 2**30


def size_text(n: float) -> str:
    """Bytes for messages, in the largest binary unit that keeps the number at least 1: ``'12.3 GiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} TiB"
