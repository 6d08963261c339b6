"""``AnalysisConfig``: every choice an analysis takes, in one frozen object.

The CLI builds it once from its options (``ckptscan analyze``, ``ckptscan eval``); Python callers
pass one to ``ckptscan.analyze(run, config)`` or its fields as keywords.  A value that can never be
right is a ``UsageError`` at construction; whether a named file exists is checked when the analysis
starts (``ckptscan.api.analyze``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from ckptscan.errors import UsageError

DEVICES = ("auto", "cpu", "cuda")
# who runs the per-checkpoint units (ckptscan/pipeline/executors.py holds the registry of these names)
EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class AnalysisConfig:
    # --- which checkpoints (the selection; an output folder holds one selection of one run) ---
    steps: str | None = field(
        default=None,
        metadata={"doc": "START:END: only checkpoints with START <= step <= END (either side may be empty)"},
    )
    every: int | None = field(
        default=None, metadata={"doc": "only every N-th checkpoint, in step order (N >= 1)"}
    )
    step_regex: str | None = field(
        default=None,
        metadata={"doc": "a regex with one group capturing the step, for unusual checkpoint names"},
    )
    # --- how the checkpoints are read ---
    device: str = field(
        default="auto", metadata={"doc": "where the maths runs: auto (CUDA when present), cpu, cuda"}
    )
    layout_file: Path | None = field(
        default=None,
        metadata={"doc": "a layout TOML for architectures ckptscan does not know (docs/layouts.md)"},
    )
    config_file: Path | None = field(
        default=None,
        metadata={
            "doc": "a model config for checkpoints that carry none: an HF config.json, or a layout TOML"
        },
    )
    heads: int | None = field(
        default=None, metadata={"doc": "number of attention heads (overrides any config)"}
    )
    kv_heads: int | None = field(
        default=None, metadata={"doc": "number of key/value heads (overrides any config)"}
    )
    trust_pickle: bool = field(
        default=False,
        metadata={
            "doc": "allow torch files that need arbitrary unpickling (executes code from the checkpoint)"
        },
    )
    replay: bool = field(default=True, metadata={"doc": "use replay activation files when the run has them"})
    replay_pattern: str | None = field(
        default=None,
        metadata={"doc": "where replay files are, relative to the run, e.g. 'replay/step_{step}.h5'"},
    )
    # --- who runs the per-checkpoint work (docs/scale.md) ---
    executor: str = field(
        default="local",
        metadata={"doc": "local: in this process, in order; ray: one Ray task per checkpoint part"},
    )
    ray_address: str | None = field(
        default=None,
        metadata={
            "doc": "the Ray cluster to join (ray executor; default: RAY_ADDRESS, else a local instance)"
        },
    )
    workers: int | None = field(
        default=None,
        metadata={"doc": "ray executor: tasks in flight at once (default: the cluster's CPUs, or GPUs)"},
    )
    # --- how the run is judged ---
    log_file: Path | None = field(
        default=None, metadata={"doc": "the training log to read the loss from (default: found in the run)"}
    )
    baseline: Path | None = field(
        default=None, metadata={"doc": "a healthy reference run of the same recipe, compared step by step"}
    )

    def __post_init__(self) -> None:
        for name in ("layout_file", "config_file", "log_file", "baseline"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(value))
        if self.device not in DEVICES:
            raise UsageError(f"--device {self.device}: expected one of {', '.join(DEVICES)}")
        if self.executor not in EXECUTORS:
            raise UsageError(f"--executor {self.executor}: expected one of {', '.join(EXECUTORS)}")
        if self.executor == "local" and (self.ray_address is not None or self.workers is not None):
            raise UsageError("--address and --workers are options of --executor ray")
        for name, flag in (
            ("every", "--every"),
            ("heads", "--heads"),
            ("kv_heads", "--kv-heads"),
            ("workers", "--workers"),
        ):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise UsageError(f"{flag} {value!r}: must be a whole number")
            if value is not None and value < 1:
                raise UsageError(f"{flag} {value}: must be >= 1")

    @property
    def selection(self) -> dict:
        """The checkpoint selection (recorded in an output folder's run.json)."""
        return {"steps": self.steps, "every": self.every, "step_regex": self.step_regex}

    def for_reference(self) -> AnalysisConfig:
        """The configuration a ``baseline`` reference run is analysed with: the same, without its own
        log or baseline."""
        return dataclasses.replace(self, log_file=None, baseline=None)

    @classmethod
    def fields_doc(cls) -> dict[str, str]:
        """Field name -> its one-line description."""
        return {f.name: f.metadata.get("doc", "") for f in dataclasses.fields(cls)}
