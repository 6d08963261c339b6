"""Monitors: pure functions (tensors in, numbers out) and the registry that names what they compute.

``registry.py`` holds the series specs, the weight-side families and their detectors; each family
registers itself in its own module: ``attention.py`` (the QK form and its increment, per head),
``projection.py`` (the attention output projection's step size), ``router.py`` (MoE routers);
``activations.py`` registers the ``act.*`` series of the replay side, and this file the one series
the analysis loop itself writes (``numerics.nonfinite``).  Series names are parsed in ``names.py``
only.
"""

from __future__ import annotations

from ckptscan.monitors.registry import (
    DETECTORS,
    FAMILIES,
    REGISTRY,
    BlockStep,
    Detector,
    Family,
    MonitorSpec,
    Role,
    family_order,
    leading,
    register,
    register_family,
    series,
    spec,
    unregister_family,
)

__all__ = [
    "DETECTORS", "FAMILIES", "REGISTRY", "BlockStep", "Detector", "Family", "MonitorSpec", "Role",
    "family_order", "leading", "register", "register_family", "series", "spec", "unregister_family",
]  # fmt: skip

# the built-in families, in the order the analysis loop runs them (and the reports list them)
from ckptscan.monitors import attention as _attention  # noqa: F401
from ckptscan.monitors import projection as _projection  # noqa: F401
from ckptscan.monitors import router as _router  # noqa: F401

# --- numerics: written by the analysis loop over every family's tensors -------------------------
NONFINITE = "numerics.nonfinite"
register(
    NONFINITE,
    "numerics",
    "layer",
    "single",
    "up",
    "count of NaN/Inf values in the layer's q, k and router tensors",
)

# --- activation side (monitors/activations.py registers the act.* series) ----------------------
from ckptscan.monitors import activations as _activations  # noqa: E402, F401 -- registers after register exists
