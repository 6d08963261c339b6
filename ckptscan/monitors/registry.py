"""The monitor registry: every timeline series ckptscan computes, and the weight-side families that
compute them, by name.

A *series* (``MonitorSpec``) is what the timeline stores, the detector scores and the reports draw:

``scope``: "head" series are [layers, heads]; "layer" series are [layers, 1].
``kind``: "single" is computed from one checkpoint; "pair" from a checkpoint and the previous one
(undefined, NaN, at the first analysed checkpoint).
``direction``: which deviation from the baseline is anomalous for detection: "down", "up" or "both".

A weight-side *family* (``Family``) is one unit: which blocks of a resolved layout it reads
(``blocks``), how it loads a block's tensors (``load``), what it computes from one checkpoint
(``single``) and from a checkpoint and the previous one (``pair``), how wide its head-scope series
are (``columns``), the series it registers and the detectors that watch them.  The analysis loop
(``ckptscan.pipeline.analyzer``) runs every registered family over every block of every
checkpoint; the timeline, detection and reports pick the series up by name.  A new family is one
``register_family(Family(...))`` call in its own module (CONTRIBUTING.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ckptscan.monitors import names


@dataclass(frozen=True)
class MonitorSpec:
    name: str
    family: str  # the family that computes it: "attention", "router", "numerics", "act_attention", ...
    scope: str  # "head" | "layer"
    kind: str  # "single" | "pair"
    direction: str  # "down" | "up" | "both"
    description: str


class Role(StrEnum):
    """What the classifier reads a detector's alarms as (``ckptscan.judge.classify``)."""

    STRUCTURE = "structure"  # the update's structure (D2 spectral entropy) collapsed
    STEP_SIZE = "step_size"  # the step size (update ratios) grew
    PROJ_STEP = (
        "proj_step_size"  # the output projection's step size grew (the attention fault does not move it)
    )
    SECOND_ORDER = "second_order"  # the second-order term of the update (||D3|| / ||D2||) grew
    LOGITS = "logits"  # the attention logits (||M||) grew
    OTHER = "other"  # a family's own signal: reported as evidence, never decides a class by itself


@dataclass(frozen=True)
class Detector:
    """How one series is scored (``ckptscan.judge.detect``, docs/detection.md)."""

    monitor: str
    mode: str  # "level" | "rate" | "shift" (level against the series' own trend, carried forward)
    log: bool  # score log(x) (positive, scale-like quantities)
    per_head: bool  # False: median over heads first
    floor: float  # minimum scale (units of x, or of log x per checkpoint)
    role: str  # a ``Role``: what the classifier reads it as
    reference: str = (
        "flat"  # rate, "up": "flat" (max(0, recent change)) | "trend" (recent change, growth only)
    )
    broad: bool = False  # a step size is global: alarms need Params.breadth of the detector's columns off
    #                      (and, self-referenced, the output projections not calm: detect.proj_calm)


@dataclass
class BlockStep:
    """What a family's ``single`` and ``pair`` functions get for one block of one checkpoint."""

    block: Any  # the layout block (``AttnBlock``, ``RouterBlock``, or what the family's ``blocks`` gives)
    now: tuple  # its tensors at this checkpoint (``load``), float32 on the analysis device
    before: tuple | None  # the previous analysed checkpoint's (same shapes, all finite), or None
    carried: Any  # what ``keep`` held for this block at the previous checkpoint, when it was computed then
    workspace: Any  # ``ckptscan.monitors.attention.Workspace``: reusable float64 buffers
    keep: Any = None  # set by the functions: handed to the next checkpoint as ``carried``


Values = dict[str, Any]  # monitor key (series name without its prefix) -> [columns] tensor or number


@dataclass(frozen=True)
class Family:
    """One weight-side monitor family (see the module docstring).

    ``blocks(layout)``: the blocks it reads (each has ``layer`` and ``tensors``, the names it reads);
    ``load(block, read)``: the block's tensors (``read`` is ``TensorSource.read``; None entries
    allowed); ``prefix(block)``: the series prefix of the block's values (the series are
    ``<prefix>.<key>``); ``single(step)`` / ``pair(step)``: key -> value per column (``pair`` runs
    first, only when the previous checkpoint's tensors are at hand); ``columns(layout, prefix)``: the
    width of the family's head-scope series (layer-scope series are one column)."""

    name: str
    blocks: Callable[[Any], Sequence[Any]]
    load: Callable[[Any, Callable], tuple]
    single: Callable[[BlockStep], Values]
    pair: Callable[[BlockStep], Values] | None = None
    prefix: Callable[[Any], str] | None = None  # default: the family's series prefix
    columns: Callable[[Any, str], int] = lambda layout, prefix: 1
    series: tuple[MonitorSpec, ...] = ()
    detectors: tuple[Detector, ...] = ()
    leading: tuple[
        str, ...
    ] = ()  # series the reports show when no alarm names others (after the built-in ones)

    def prefix_of(self, block) -> str:
        if self.prefix is not None:
            return self.prefix(block)
        return names.split(self.series[0].name)[0] if self.series else self.name


REGISTRY: dict[str, MonitorSpec] = {}
FAMILIES: list[Family] = []  # weight-side families, in the order the analysis loop runs them
DETECTORS: list[Detector] = []  # every family's detectors, in registration order (a live list)


def register(name, family, scope, kind, direction, description) -> MonitorSpec:
    """Register one series (one a family computes, or one another stage writes: ``numerics.*``,
    ``act.*``)."""
    if name in REGISTRY:
        raise ValueError(f"monitor {name!r} registered twice")
    spec = MonitorSpec(name, family, scope, kind, direction, description)
    REGISTRY[name] = spec
    return spec


def series(family: str, scope: str, prefix: str, rows) -> tuple[MonitorSpec, ...]:
    """``MonitorSpec``s from ``(key, kind, direction, description)`` rows, named ``<prefix>.<key>``."""
    return tuple(
        MonitorSpec(f"{prefix}.{key}", family, scope, kind, direction, description)
        for key, kind, direction, description in rows
    )


def register_family(family: Family) -> Family:
    """Register a weight-side family: its series, its detectors, and the family itself (the analysis
    loop runs it).  Raises ValueError for a name already taken or a detector of an unknown series."""
    if any(f.name == family.name for f in FAMILIES):
        raise ValueError(f"monitor family {family.name!r} registered twice")
    clash = [s.name for s in family.series if s.name in REGISTRY]
    if clash:
        raise ValueError(f"monitor {clash[0]!r} registered twice")
    own = {s.name for s in family.series}
    unknown = [d.monitor for d in family.detectors if d.monitor not in own]
    unknown += [name for name in family.leading if name not in own]
    if unknown:
        raise ValueError(f"{unknown[0]!r}: not a series of family {family.name!r}")
    for s in family.series:
        REGISTRY[s.name] = s
    FAMILIES.append(family)
    DETECTORS.extend(family.detectors)
    return family


def unregister_family(name: str) -> None:
    """Remove a family, its series and its detectors (a test that registered one for a while)."""
    fam = next(f for f in FAMILIES if f.name == name)
    FAMILIES.remove(fam)
    for s in fam.series:
        REGISTRY.pop(s.name, None)
    DETECTORS[:] = [d for d in DETECTORS if d not in fam.detectors]


def spec(name: str) -> MonitorSpec:
    """The spec of a series; block-prefixed names (``attn_rope.M.entropy2``) map to their base."""
    if name in REGISTRY:
        return REGISTRY[name]
    base = names.base(name)
    if base in REGISTRY:
        return REGISTRY[base]
    raise KeyError(name)


def leading() -> list[str]:
    """Every family's ``leading`` series, in registration order."""
    return [name for fam in FAMILIES for name in fam.leading]


def family_order() -> list[str]:
    """Family names in the order their series were registered (the reports' order)."""
    return list(dict.fromkeys(s.family for s in REGISTRY.values()))
