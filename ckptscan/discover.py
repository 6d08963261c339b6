"""Run directory -> checkpoints ordered by step, plus what was skipped and why.

Step names understood (the folder or file name, an extension such as ``.ckpt`` stripped):

    checkpoint-500        Hugging Face Trainer
    step-500, step500     torchtitan, OLMo-core
    step_500
    iter_0000500          Megatron-LM
    global_step500        DeepSpeed
    epoch=0-step=500      PyTorch Lightning (``epoch=0-step=500.ckpt``)
    500                   plain numbers
    --step-regex REGEX    anything else (one capture group: the step)

A name that starts like a checkpoint but carries more (``step500-tmp``, ``checkpoint-500.partial``)
is an unfinished write and is listed as skipped.  So is a checkpoint folder the readers find
incomplete (a sharded checkpoint missing a shard, a DCP folder without ``.metadata``).  Discovery
reads directory entries and a few small files only, so 10,000 checkpoint folders stay fast.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ckptscan.errors import InputError, UsageError

# anchored: the whole (extension-stripped) name must match
STEP_PATTERNS: tuple[re.Pattern, ...] = tuple(
    re.compile(p)
    for p in (
        r"checkpoint[-_](\d+)",
        r"step[-_]?(\d+)",
        r"iter_(\d+)",
        r"global_step(\d+)",
        r"(?:epoch=\d+[-_])?step=(\d+)",
        r"(\d+)",
    )
)
# the start of a checkpoint name, for spotting unfinished writes like step500-tmp
_PREFIX = re.compile(r"^(?:checkpoint[-_]|step[-_]?|iter_|global_step|epoch=\d+[-_]step=)\d+")
CHECKPOINT_FILE_EXTS = (".ckpt", ".pt", ".pth", ".bin", ".safetensors")
# folders under which frameworks put their checkpoints, looked into when the run dir has none
CONTAINER_DIRS = ("checkpoints", "checkpoint", "ckpt", "ckpts")


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: Path


@dataclass(frozen=True)
class Skipped:
    """An entry of the run that was not analysed.  ``error`` is False for what is expected in a
    live run (an unfinished write's temporary name) and True for what could not be read."""

    path: str
    reason: str
    error: bool = True

    def as_dict(self) -> dict:
        return {"path": self.path, "reason": self.reason, "error": self.error}


def parse_step(name: str, step_regex: re.Pattern | None = None) -> int | None:
    """The training step a checkpoint name stands for, or None if the name is not a checkpoint's."""
    stem = name
    for ext in CHECKPOINT_FILE_EXTS:
        if stem.endswith(ext):
            stem = stem[: -len(ext)]
            break
    patterns = (step_regex,) if step_regex is not None else STEP_PATTERNS
    for pat in patterns:
        m = pat.fullmatch(stem)
        if m:
            try:
                return int(m.group(1))
            except (IndexError, ValueError):
                return None
    return None


def compile_step_regex(text: str | None) -> re.Pattern | None:
    if text is None:
        return None
    try:
        pat = re.compile(text)
    except re.error as e:
        raise UsageError(f"--step-regex {text!r} is not a valid regular expression: {e}") from None
    if pat.groups < 1:
        raise UsageError(f"--step-regex {text!r} needs one capture group for the step number")
    return pat


def parse_steps_range(text: str | None) -> tuple[int | None, int | None]:
    """``START:END`` (either side may be empty), inclusive."""
    if not text:
        return None, None
    m = re.fullmatch(r"\s*(\d*)\s*:\s*(\d*)\s*", text)
    if not m:
        raise UsageError(f"--steps {text!r}: expected START:END, e.g. 1000:5000 or :5000")
    lo = int(m.group(1)) if m.group(1) else None
    hi = int(m.group(2)) if m.group(2) else None
    if lo is not None and hi is not None and hi < lo:
        raise UsageError(f"--steps {text!r}: END is before START")
    return lo, hi


def discover(
    run_dir: str | Path,
    *,
    step_regex: str | re.Pattern | None = None,
    steps: str | tuple[int | None, int | None] | None = None,
    every: int | None = None,
) -> tuple[list[Checkpoint], list[Skipped]]:
    """The run's checkpoints in step order, and the entries skipped (with reasons)."""
    from ckptscan.readers import detect_format, is_complete

    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise InputError("run directory does not exist", run_dir)
    if not run_dir.is_dir():
        raise InputError("not a directory (give the folder that holds the checkpoints)", run_dir)
    pat = compile_step_regex(step_regex) if isinstance(step_regex, str) else step_regex
    lo, hi = parse_steps_range(steps) if isinstance(steps, str) or steps is None else steps
    if every is not None and every < 1:
        raise UsageError(f"--every {every}: must be >= 1")

    found, skipped = _scan(run_dir, pat)
    if not found and pat is None:
        for sub in CONTAINER_DIRS:
            if (run_dir / sub).is_dir():
                f2, s2 = _scan(run_dir / sub, pat)
                found += f2
                skipped += s2

    by_step: dict[int, Checkpoint] = {}
    for step, path in sorted(found, key=lambda sp: (sp[0], sp[1].name)):
        if lo is not None and step < lo or hi is not None and step > hi:
            continue
        fmt = detect_format(path)
        if fmt is None:
            skipped.append(Skipped(str(path), "no checkpoint weights found in it"))
            continue
        ok, why = is_complete(path)
        if not ok:
            skipped.append(Skipped(str(path), f"incomplete checkpoint: {why}"))
            continue
        if step in by_step:
            skipped.append(Skipped(str(path), f"duplicate step {step} (already have {by_step[step].path.name})"))
            continue
        by_step[step] = Checkpoint(step, path)
    ckpts = [by_step[s] for s in sorted(by_step)]
    if every and every > 1:
        ckpts = ckpts[::every]
    return ckpts, skipped


NAMES_LOOKED_FOR = (
    "checkpoint-N, step-N/stepN/step_N, iter_N, global_stepN, epoch=E-step=N[.ckpt], N "
    "(folders, or *.ckpt/.pt/.pth/.bin/.safetensors files), in the run folder or its "
    + "/, ".join(CONTAINER_DIRS) + "/ subfolder"
)


def no_checkpoints_error(
    run_dir: str | Path, skipped: list[Skipped], steps: str | None = None, step_regex: str | None = None
) -> InputError:
    """The error for a run in which discovery found no checkpoint to analyse (an input error: a run
    that silently reports "healthy" over nothing would hide a wrong path).  One line: where, what
    names were looked for, and how many entries were skipped (their reasons are in the list)."""
    looked = f"names matching --step-regex {step_regex!r}" if step_regex else NAMES_LOOKED_FOR
    msg = f"no checkpoints found in {run_dir} (looked for {looked}; other names: --step-regex)"
    if steps:
        msg += f" with steps in {steps}"
    if skipped:
        n = len(skipped)
        msg += f"; {n} {'entry' if n == 1 else 'entries'} skipped, e.g. {Path(skipped[0].path).name}: {skipped[0].reason}"
    return InputError(msg)


def _scan(folder: Path, pat: re.Pattern | None) -> tuple[list[tuple[int, Path]], list[Skipped]]:
    found: list[tuple[int, Path]] = []
    skipped: list[Skipped] = []
    try:
        it = os.scandir(folder)
    except OSError as e:
        raise InputError(f"cannot list directory: {e.strerror or e}", folder) from None
    with it:
        for entry in it:
            name = entry.name
            if name.startswith("."):
                continue
            step = parse_step(name, pat)
            if step is None:
                if pat is None and _PREFIX.match(name):
                    skipped.append(Skipped(entry.path, "unfinished or temporary checkpoint name", error=False))
                continue
            try:
                is_dir = entry.is_dir()
                is_file = entry.is_file()
            except OSError as e:  # symlink loop, permission denied
                skipped.append(Skipped(entry.path, f"cannot stat: {e.strerror or e}"))
                continue
            if is_dir or (is_file and name.endswith(CHECKPOINT_FILE_EXTS)):
                found.append((step, Path(entry.path)))
    return found, skipped
