"""In-loop monitoring (docs/live.md): the weight-side monitors computed from the live parameters every
N optimizer steps, into a store that ``ckptscan report`` and the detector read like an analysis of
checkpoints.

* ``Monitor(model, out_dir, every=N).step(step)``: any training loop;
* ``HFCallback(out_dir, every=N)``: a ``transformers.TrainerCallback``;
* ``LightningCallback(out_dir, every=N)``: a ``lightning.pytorch.Callback``.

transformers and lightning are imported only when their callback is used: neither is a dependency
of ckptscan.
"""

from __future__ import annotations

from .monitor import DEFAULT_DETECT_EVERY, DEFAULT_EVERY, Alarm, Monitor

__all__ = ["DEFAULT_DETECT_EVERY", "DEFAULT_EVERY", "Alarm", "HFCallback", "LightningCallback", "Monitor"]


def __getattr__(name: str):
    if name == "HFCallback":
        from .hf import HFCallback

        return HFCallback
    if name == "LightningCallback":
        from .lightning import LightningCallback

        return LightningCallback
    raise AttributeError(name)
