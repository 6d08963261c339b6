"""The fault classes a verdict names, spelled once.

A verdict's ``fault_type`` is a ``FaultClass`` value (``lowprec_attention``); the fault-injection
drills (``ckptscan drill --fault``, a drill's ``truth.json``) spell an injected fault with hyphens
(``lowprec-attention``): ``drill_name`` and ``from_drill_name`` convert.  The JSON Schema's
``fault_type`` enum is checked against this enum by the tests.
"""

from __future__ import annotations

from enum import StrEnum


class FaultClass(StrEnum):
    LOWPREC_ATTENTION = "lowprec_attention"  # low-precision attention numerics
    HIGH_LR = "high_lr"  # a too-large learning rate
    COMBINED = "combined"  # both
    OVERFLOW = "overflow"  # NaN/Inf in weights with no earlier monitor alarm
    HEALTHY = "healthy"  # no sustained alarm over enough of the run
    INCONCLUSIVE = "inconclusive"  # too little of the run examined for a verdict

    @property
    def drill_name(self) -> str:
        """How the drills spell it (``ckptscan drill --fault``, truth.json ``fault``)."""
        return self.value.replace("_", "-")


INJECTABLE = (FaultClass.LOWPREC_ATTENTION, FaultClass.HIGH_LR, FaultClass.COMBINED)  # what a drill injects
NO_FAULT = "none"  # a drill without an injected fault (truth.json ``fault``); "benign" events are healthy too
UNKNOWN = "unknown"  # an anomalous verdict that names no class: a loss that diverged unseen, or a summary without one


def from_drill_name(name: str) -> FaultClass | None:
    """The class of a drill's ``fault`` (None for a name that is none of them)."""
    if name in (NO_FAULT, "benign"):
        return FaultClass.HEALTHY
    return next((f for f in FaultClass if f.drill_name == name), None)
