"""ckptscan: offline checkpoint forensics for LLM training runs.

from ckptscan import analyze
result = analyze("runs/my-run")
result.verdict        # {"anomalous": ..., "earliest_step": ..., "fault_type": ..., ...}
result.timeline.get("attn.D2.entropy2")   # [checkpoints, layers, heads]
"""

__version__ = "0.1.0"


def analyze(*args, **kwargs):
    """See ``ckptscan.api.analyze``."""
    from ckptscan.api import analyze as _analyze

    return _analyze(*args, **kwargs)


def load_result(out_dir):
    """See ``ckptscan.api.load_result``."""
    from ckptscan.api import load_result as _load

    return _load(out_dir)


__all__ = ["__version__", "analyze", "load_result"]
