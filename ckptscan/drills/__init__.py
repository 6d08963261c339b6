"""Fault-injection drills: a tiny LLaMA-style model trained on CPU with a fault switched on at a
chosen step, written out as a run directory in real checkpoint formats with its ground truth."""

from .train import FAULTS, divergence_step, run_drill

__all__ = ["FAULTS", "divergence_step", "run_drill"]
