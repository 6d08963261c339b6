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

Training frameworks' default trees are recognised from the run root first (``ckptscan/discover/frameworks.py``:
Lightning's ``lightning_logs/version_N/checkpoints``, accelerate's ``checkpoints/checkpoint_<i>``,
torchtitan's ``checkpoint/step-N``, ...).  There a checkpoint whose name is not a step (Lightning's
``last.ckpt``, accelerate's save index) takes the step it records (``readers/steps.py``).

A name that starts like a checkpoint but carries more (``step500-tmp``, ``checkpoint-500.partial``)
is an unfinished write and is listed as skipped.  So is a checkpoint folder the readers find
incomplete (a sharded checkpoint missing a shard, a DCP folder without ``.metadata``).  Discovery
reads directory entries and a few small files only, so 10,000 checkpoint folders stay fast.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ckptscan.discover.frameworks import FRAMEWORKS, Framework
from ckptscan.errors import InputError, UsageError
from ckptscan.limits import MAX_STEP
from ckptscan.readers.registry import file_suffixes

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
_PREFIX = re.compile(r"^(?:tmp[-_])?(?:checkpoint[-_]|step[-_]?|iter_|global_step|epoch=\d+[-_]step=)\d+")
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
    for ext in file_suffixes():
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


@dataclass
class Discovery:
    """What discovery found: the checkpoints to analyse, the entries skipped, and where they came from."""

    checkpoints: list[Checkpoint]
    skipped: list[Skipped]
    run_folder: Path  # the framework's run folder (a Lightning ``version_N``), else the run dir
    framework: Framework | None = None
    all_steps: list[int] = field(default_factory=list)  # every checkpoint step found, before --steps/--every
    notes: list[str] = field(default_factory=list)


def discover(
    run_dir: str | Path,
    *,
    step_regex: str | re.Pattern | None = None,
    steps: str | tuple[int | None, int | None] | None = None,
    every: int | None = None,
) -> tuple[list[Checkpoint], list[Skipped]]:
    """The run's checkpoints in step order, and the entries skipped (with reasons)."""
    d = discover_run(run_dir, step_regex=step_regex, steps=steps, every=every)
    return d.checkpoints, d.skipped


def discover_run(
    run_dir: str | Path,
    *,
    step_regex: str | re.Pattern | None = None,
    steps: str | tuple[int | None, int | None] | None = None,
    every: int | None = None,
) -> Discovery:
    """``discover`` with the framework recognised, its run folder and notes for the report."""
    from ckptscan.readers import detect_format, is_complete

    run_dir = Path(run_dir)
    try:
        run_dir.stat()
    except FileNotFoundError:
        raise InputError("run directory does not exist", run_dir) from None
    except OSError as e:  # a parent we may not search, a loop
        raise InputError(f"cannot read: {e.strerror or e}", run_dir) from None
    if not run_dir.is_dir():
        raise InputError("not a directory (give the folder that holds the checkpoints)", run_dir)
    pat = compile_step_regex(step_regex) if isinstance(step_regex, str) else step_regex
    lo, hi = parse_steps_range(steps) if isinstance(steps, str) or steps is None else steps
    if every is not None and every < 1:
        raise UsageError(f"--every {every}: must be >= 1")

    tree = recognise(run_dir) if pat is None else None
    if tree is not None:
        fw, run_folder, containers, notes = tree
        found, skipped = [], []
        for folder in containers:
            f2, s2 = _scan(folder, None, fw, notes)
            found += f2
            skipped += s2
    else:
        fw, run_folder, notes = None, run_dir, []
        found, skipped = _scan(run_dir, pat)
        if not found and pat is None:
            for sub in CONTAINER_DIRS:
                if os.path.isdir(run_dir / sub):
                    f2, s2 = _scan(run_dir / sub, pat)
                    found += f2
                    skipped += s2

    by_step: dict[int, Checkpoint] = {}
    for step, path in sorted(found, key=lambda sp: (sp[0], _is_copy(sp[1].name), sp[1].name)):
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
            first = by_step[step].path.name
            if _is_copy(path.name):
                skipped.append(Skipped(str(path), f"copy of {first} (same step {step})", error=False))
            else:
                skipped.append(Skipped(str(path), f"duplicate step {step} (already have {first})"))
            continue
        by_step[step] = Checkpoint(step, path)
    ckpts = [by_step[s] for s in sorted(by_step)]
    if every and every > 1:
        ckpts = ckpts[::every]
    all_steps = sorted({step for step, _ in found})
    return Discovery(ckpts, skipped, run_folder, fw, all_steps, notes)


def glob_under(folder: Path, pattern: str) -> list[Path]:
    """``folder.glob(pattern)`` where ``"."`` is the folder itself and leading ``../`` go up."""
    while pattern.startswith("../"):
        folder, pattern = folder.parent, pattern[3:]
    if pattern == ".":
        return [folder]
    try:
        return list(folder.glob(pattern))
    except OSError:
        return []


def _is_copy(name: str) -> bool:
    """Lightning's ``last.ckpt`` / NeMo's ``...-last``: a second copy of the newest checkpoint."""
    stem = name.removesuffix(".ckpt")
    return stem == "last" or stem.startswith("last-v") or stem.endswith("-last")


def _natural(name: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def recognise(run_dir: Path) -> tuple[Framework, Path, list[Path], list[str]] | None:
    """The first framework of ``FRAMEWORKS`` whose tree this is: the framework, its run folder, the
    folders holding its checkpoints, and notes (several runs under the root: which one is used)."""
    for fw in FRAMEWORKS:
        for runs in fw.runs:
            found = sorted(glob_under(run_dir, runs), key=lambda p: _natural(p.name))
            cands = [p for p in found if os.path.isdir(p)]  # False, not an error, for a folder we cannot read
            hits = [(p, _marked(fw, p)) for p in cands]
            hits = [(p, cs) for p, cs in hits if cs]
            if not hits:
                continue
            run_folder, containers = hits[-1]
            notes = [f"{fw.name} output tree recognised"]
            if len(hits) > 1:
                names = ", ".join(p.name for p, _ in hits)
                notes.append(
                    f"{len(hits)} runs with checkpoints under {run_dir / runs} ({names}); analysing "
                    f"{run_folder.name}, the newest (point ckptscan at another one to analyse it)"
                )
            return fw, run_folder, containers, notes
    return None


def _marked(fw: Framework, run_folder: Path) -> list[Path]:
    """The containers of ``run_folder`` in which one of the framework's marks is found."""
    out = []
    for c in fw.containers:
        folder = (run_folder / c) if c != "." else run_folder
        if os.path.isdir(folder) and any(glob_under(folder, m) for m in fw.marks):
            out.append(folder)
            break  # the first container that has them (checkpoints/ before the run folder itself)
    return out


def names_looked_for() -> str:
    """The checkpoint names discovery looks for (the file endings: every registered format's)."""
    return (
        "checkpoint-N, step-N/stepN/step_N, iter_N, global_stepN, epoch=E-step=N[.ckpt], N "
        f"(folders, or *{'/'.join(file_suffixes())} files), in the run folder or its "
        + "/, ".join(CONTAINER_DIRS)
        + "/ subfolder"
    )


def no_checkpoints_error(
    run_dir: str | Path, skipped: list[Skipped], steps: str | None = None, step_regex: str | None = None
) -> InputError:
    """The error for a run in which discovery found no checkpoint to analyse (an input error: a run
    that silently reports "healthy" over nothing would hide a wrong path).  One line: where, what
    names were looked for, and how many entries were skipped (their reasons are in the list)."""
    looked = f"names matching --step-regex {step_regex!r}" if step_regex else names_looked_for()
    msg = f"no checkpoints found in {run_dir} (looked for {looked}; other names: --step-regex)"
    if steps:
        msg += f" with steps in {steps}"
    if skipped:
        n = len(skipped)
        first = skipped[0]
        msg += (
            f"; {n} {'entry' if n == 1 else 'entries'} skipped, e.g. {Path(first.path).name}: {first.reason}"
        )
    return InputError(msg)


def _scan(
    folder: Path, pat: re.Pattern | None, fw: Framework | None = None, notes: list[str] | None = None
) -> tuple[list[tuple[int, Path]], list[Skipped]]:
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
            step = _name_step(name, pat, fw)
            if step is not None and step > MAX_STEP:
                skipped.append(
                    Skipped(
                        entry.path, f"step {step} is beyond the int64 range of steps (at most {MAX_STEP})"
                    )
                )
                continue
            if step is None and pat is None and _PREFIX.match(name):
                skipped.append(Skipped(entry.path, "unfinished or temporary checkpoint name", error=False))
                continue
            if step is None and (fw is None or not fw.steps):
                continue
            try:
                is_dir = entry.is_dir()
                is_file = entry.is_file()
            except OSError as e:  # symlink loop, permission denied
                skipped.append(Skipped(entry.path, f"cannot stat: {e.strerror or e}"))
                continue
            if not (is_dir or (is_file and name.endswith(file_suffixes()))):
                continue
            if fw is not None and (step is None or not fw.names_are_steps):
                if not _may_record_step(Path(entry.path), is_dir, fw):
                    continue
                step = _content_step(Path(entry.path), step, fw, skipped, notes)
                if step is None:
                    continue
            assert step is not None  # a name without a step went through _content_step above
            found.append((step, Path(entry.path)))
    return found, skipped


def _name_step(name: str, pat: re.Pattern | None, fw: Framework | None) -> int | None:
    if fw is not None and fw.name_pattern is not None:
        step = parse_step(name, fw.name_pattern)
        if step is not None:
            return step
    return parse_step(name, pat)


def _may_record_step(path: Path, is_dir: bool, fw: Framework) -> bool:
    """A folder with weights in it, or a file of the kind the framework's marks name (``*.ckpt``)."""
    from ckptscan.readers import detect_format

    if is_dir:
        return detect_format(path) is not None
    return any(fnmatch.fnmatch(path.name, m) for m in fw.marks)


def _content_step(
    path: Path, name_step: int | None, fw: Framework, skipped: list[Skipped], notes: list[str] | None
) -> int | None:
    """The step a framework's checkpoint records; its name's number when it records none (noted)."""
    from ckptscan.readers.steps import recorded_step

    step = recorded_step(path, fw.steps)
    if step is not None:
        return step
    if name_step is not None:
        msg = (
            f"{fw.name}: no training step recorded in a checkpoint (looked for {', '.join(fw.steps)}); "
            f"the number in its name is used, which may count saves rather than steps"
        )
        if notes is not None and msg not in notes:
            notes.append(msg)
        return name_step
    skipped.append(
        Skipped(
            str(path),
            f"no training step in its name or in it (looked for "
            f"{', '.join(fw.steps)} as {fw.name} records it)",
        )
    )
    return None
