"""Series names: the one place that parses them.

A series is named ``<block>.<monitor>``: ``attn.D2.entropy2``, ``router.update_ratio``,
``act.attn.max_logit``.  An attention block other than the main one carries its own block name
(MLA's shared RoPE part: ``attn_rope.D2.entropy2``); it is the same monitor as the ``attn.`` series
of its base name, registered and watched once.
"""

from __future__ import annotations

ATTN = "attn"  # the main attention block's prefix; other attention blocks' prefixes start with it


def split(name: str) -> tuple[str, str]:
    """``("attn_rope", "D2.entropy2")`` from ``"attn_rope.D2.entropy2"`` (rest "" without a dot)."""
    block, _, rest = name.partition(".")
    return block, rest


def join(block: str, key: str) -> str:
    """The series name of monitor ``key`` of block ``block``."""
    return f"{block}.{key}"


def is_attention(name: str) -> bool:
    """A weight-side attention series (of any attention block), not an activation one."""
    return split(name)[0].startswith(ATTN)


def base(name: str) -> str:
    """The registered name of a series: a block-prefixed attention series maps to its ``attn.``
    name (``attn_rope.M.entropy2`` -> ``attn.M.entropy2``); any other name is its own base."""
    block, rest = split(name)
    return join(ATTN, rest) if block.startswith(ATTN) and rest else name


def same_monitor(name: str, registered: str) -> bool:
    """``name`` is the series ``registered`` or a block-prefixed variant of it."""
    return name == registered or (registered.startswith(ATTN + ".") and base(name) == registered)


def key(name: str) -> str:
    """The last part of a series name (``update_ratio`` of ``attn.q.update_ratio``)."""
    return name.rsplit(".", 1)[-1]
