"""The training frameworks whose default output trees ckptscan recognises from the run root.

One table, one row per framework: where a run's folder is under the root, which folders hold its
checkpoints, which files show that the tree is that framework's, where its training log is, and where
a checkpoint records its training step when its name does not give it.  Discovery
(``ckptscan/discover/checkpoints.py``) walks the table; the step sources are read by ``ckptscan/readers/steps.py``;
the log globs are searched by ``ckptscan/judge/logs.py``.  docs/layouts.md has the same table for users.

All globs are relative: ``runs`` to the root, ``containers`` and ``logs`` to a run folder, ``marks`` to
a container.  ``"."`` is the folder itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Framework:
    name: str
    marks: tuple[str, ...]  # any match (relative to a container) identifies the tree
    containers: tuple[str, ...] = (".",)
    runs: tuple[str, ...] = (".",)  # several matches: the newest one with checkpoints is used
    logs: tuple[str, ...] = ()
    steps: tuple[str, ...] = ()  # step sources inside a checkpoint (readers/steps.py), tried in order
    names_are_steps: bool = True  # False: a number in the name is not the training step
    log_step_offset: int = 0  # added to its own log's steps (Lightning logs the 0-based step being taken)
    name_pattern: re.Pattern | None = field(default=None, compare=False)  # else discover.STEP_PATTERNS


FRAMEWORKS: tuple[Framework, ...] = (
    Framework(
        "hf-trainer",
        marks=("checkpoint-*/trainer_state.json",),
        logs=("trainer_state.json", "checkpoint-*/trainer_state.json", "runs/*/events.out.tfevents.*"),
        steps=("trainer_state",),
    ),
    Framework(
        # save_state(): automatic names checkpoints/checkpoint_<i> count saves, custom names are free
        "accelerate",
        containers=("checkpoints", "."),
        marks=("*/random_states_0.pkl",),
        logs=("*/events.out.tfevents.*", "*.jsonl", "*.csv"),
        steps=("optimizer",),
        names_are_steps=False,
    ),
    Framework(
        "lightning",
        runs=("lightning_logs/version_*", "."),
        containers=("checkpoints", "."),
        marks=("*.ckpt",),
        logs=("metrics.csv", "events.out.tfevents.*"),
        steps=("lightning",),
        log_step_offset=1,
    ),
    Framework(
        "torchtitan",
        containers=("checkpoint", "."),
        marks=("step-*/.metadata",),
        logs=("tb/*/events.out.tfevents.*",),
        steps=("dcp_train_state",),
    ),
    Framework("olmo-core", marks=("step*/model_and_optim/.metadata",), steps=("olmo_core",)),
    Framework(
        "deepspeed",
        marks=("global_step*/*model_states.pt",),
        steps=("deepspeed",),
        logs=("*.jsonl", "*.csv"),
    ),
    Framework(
        "megatron",
        marks=("iter_*/common.pt", "iter_*/model_optim_rng.pt", "iter_*/mp_rank_*"),
        logs=("tensorboard/events.out.tfevents.*", "../tensorboard/events.out.tfevents.*"),
    ),
    Framework(
        # NeMo 2 (<ckpt>/weights/ holds the Megatron dist checkpoint) and NeMo 1 dist checkpoints;
        # names like megatron_gpt--val_loss=2.10-step=500-consumed_samples=4000.0[-last]
        "nemo",
        runs=("*", "."),
        containers=("checkpoints",),
        marks=("*step=*/weights/.metadata", "*step=*/.metadata"),
        logs=("events.out.tfevents.*",),
        name_pattern=re.compile(r".*?(?:^|-)step=(\d+)(?:-.*)?"),
    ),
)
BY_NAME = {f.name: f for f in FRAMEWORKS}
