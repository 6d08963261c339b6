"""The public Python API: ``analyze(run_dir, ...) -> Result``.  The CLI is a thin shell over this."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ckptscan import __version__
from ckptscan.config import AnalysisConfig
from ckptscan.discover.checkpoints import (
    Checkpoint,
    Skipped,
    discover_run,
    no_checkpoints_error,
    parse_steps_range,
)
from ckptscan.errors import (
    EXIT_ANOMALY,
    EXIT_HEALTHY,
    EXIT_INCONCLUSIVE,
    EXIT_INPUT,
    CkptscanError,
    InputError,
    UsageError,
    describe,
)
from ckptscan.judge import detect, logs, verdict
from ckptscan.judge.verdict import Reference
from ckptscan.layouts import load_config_file
from ckptscan.limits import JsonError, parse_json
from ckptscan.pipeline.activations import add_churn_final
from ckptscan.pipeline.analyzer import Options, baseline_out_dir, check_outputs, resolve_device
from ckptscan.pipeline.executors import run_with
from ckptscan.readers.remote import is_url
from ckptscan.store.timeline import Timeline, assemble, atomic_write, make_dir

SCHEMA = "ckptscan/1"


@dataclass
class Result:
    """What ``analyze`` found.  ``summary`` is the stable JSON object (schema ``ckptscan/1``)."""

    run_dir: Path
    out_dir: Path
    summary: dict
    timeline: Timeline
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def verdict(self) -> dict:
        return self.summary.get("verdict") or {}

    @property
    def anomalous(self) -> bool:
        return bool((self.summary.get("verdict") or {}).get("anomalous"))

    @property
    def evidence(self) -> list[Path]:
        """The folders this result was read from (the run, a ``--baseline`` run): never written."""
        ref = (self.summary.get("detection") or {}).get("reference_run")
        return [self.run_dir, *([Path(ref)] if ref else [])]

    @property
    def inconclusive(self) -> bool:
        return self.verdict.get("fault_type") == "inconclusive"

    @property
    def state(self) -> str:
        """anomalous, inconclusive, healthy or no verdict: what every report's headline says."""
        from ckptscan.report.data import outcome

        return outcome(self.summary).state

    def exit_code(self, fail_on: str = "anomaly") -> int:
        """0 healthy, 1 anomaly found, 3 input error, 5 inconclusive (or no verdict); ``fail_on``
        picks what fails (docs/cli.md).  Only a healthy run passes, unless ``fail_on="never"``."""
        if fail_on == "never":
            return EXIT_HEALTHY
        state = self.state
        if state == "anomalous" and fail_on == "anomaly":
            return EXIT_ANOMALY
        if any(s.error for s in self.skipped):
            return EXIT_INPUT
        if state in ("inconclusive", "no verdict"):
            return EXIT_INCONCLUSIVE
        return EXIT_HEALTHY

    def to_json(self) -> str:
        return json.dumps(self.summary, indent=2, allow_nan=False, default=_json_default)


def _json_default(o):
    import numpy as np

    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(type(o))


def analyze(
    run_dir: str | Path,
    config: AnalysisConfig | None = None,
    *,
    out_dir: str | Path | None = None,
    on_progress: Callable[[int, int, Checkpoint, str], None] | None = None,
    debug: bool = False,
    command: list[str] | None = None,
    until_step: int | None = None,
    **options,
) -> Result:
    """Analyse a training run's checkpoints; write the timeline and summary; return the Result.

    ``config`` (``AnalysisConfig``) holds every choice of the analysis; without one, ``options`` are
    its fields (``analyze(run, steps="0:500", device="cpu")``).  Nothing is written inside
    ``run_dir``: results go to ``out_dir`` (default ``./ckptscan-out/<run-name>/``).  Re-running
    reuses every unchanged checkpoint's stored part.  With ``config.baseline``, the reference run is
    analysed first (cached inside ``out_dir``) and its timeline handed to the judgement.
    ``until_step``: leave out checkpoints after this step without changing the selection the output
    folder records (``ckptscan watch``: the checkpoints complete so far, analysed into the same
    folder round after round).
    """
    if config is None:
        config = AnalysisConfig(**options)
    elif options:
        raise TypeError(f"analyze: give an AnalysisConfig or its fields, not both ({', '.join(options)})")
    if is_url(run_dir):
        return _analyze_url(
            str(run_dir),
            config,
            out_dir=out_dir,
            on_progress=on_progress,
            debug=debug,
            command=command,
            until_step=until_step,
        )
    t0 = time.time()
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UsageError(
            "no such folder"
            if not run_dir.exists()
            else "not a folder (give the folder that holds the checkpoints)",
            run_dir,
        )
    cfg = config
    if cfg.baseline is not None and Path(cfg.baseline).resolve() == run_dir.resolve():
        raise UsageError("--baseline is the run itself: give a healthy run to compare it with", cfg.baseline)
    selection = cfg.selection
    out = Path(out_dir) if out_dir is not None else default_out_dir(run_dir, selection)
    evidence = [run_dir, cfg.baseline]
    check_outputs(evidence, out)
    if cfg.baseline is not None:
        check_outputs(evidence, baseline_out_dir(out, cfg.baseline))
    claim_out_dir(out, run_dir, selection)
    if cfg.layout_file is not None and not cfg.layout_file.is_file():
        raise UsageError(f"--layout {cfg.layout_file}: no such file")
    if cfg.log_file is not None and not cfg.log_file.exists():
        raise UsageError(f"--log {cfg.log_file}: no such file or folder")
    layout_file, config_file, overrides = model_inputs(
        cfg.config_file, cfg.layout_file, cfg.heads, cfg.kv_heads
    )
    lo, hi = parse_steps_range(cfg.steps)
    if until_step is not None:
        hi = until_step if hi is None else min(hi, until_step)
    found = discover_run(run_dir, step_regex=cfg.step_regex, steps=(lo, hi), every=cfg.every)
    ckpts, skipped = found.checkpoints, found.skipped
    if debug:  # stop at the first bad checkpoint, also one that discovery already turned away
        bad = next((x for x in skipped if x.error), None)
        if bad is not None:
            raise InputError(bad.reason, bad.path)
    if not ckpts:
        raise no_checkpoints_error(run_dir, skipped, steps=cfg.steps, step_regex=cfg.step_regex)
    opts = Options(
        device=resolve_device(cfg.device),
        trust_pickle=cfg.trust_pickle,
        layout_file=Path(layout_file) if layout_file else None,
        replay=cfg.replay,
        replay_pattern=cfg.replay_pattern,
        config_file=config_file,
        model_overrides=overrides,
        run_folder=found.run_folder,
    )
    log_file, log_offset = cfg.log_file, 0
    if log_file is None:
        log_file = logs.find_log(found.run_folder, None, found.framework.logs if found.framework else ())
        log_offset = found.framework.log_step_offset if found.framework else 0
    make_dir(out)
    atomic_write(out / OWNER_FILE, json.dumps({"run": str(run_dir.resolve()), "selection": selection}))

    def progress(i, ck, status):
        if on_progress:
            on_progress(i, len(ckpts), ck, status)

    results, skipped_run, layout_desc = run_with(
        cfg.executor,
        run_dir,
        out,
        ckpts,
        opts,
        progress,
        debug,
        address=cfg.ray_address,
        workers=cfg.workers,
        device_request=cfg.device,
    )
    skipped = skipped + skipped_run

    add_churn_final(results)
    findings = [f for r in results for f in r.findings]
    meta = {"run": str(run_dir), "layout": layout_desc}
    timeline = assemble([r.step for r in results], [r.values for r in results], meta)

    failure = None
    try:
        reference = _reference(cfg, out) if cfg.baseline is not None else None
        other = detect.other_model(timeline, reference.timeline) if reference is not None else None
        if other is not None:  # layer k of another model is no match for layer k of this one
            raise UsageError(f"--baseline run: {other}; give a run of the same model", cfg.baseline)
        judgement = verdict.judge(
            run_dir,
            timeline,
            findings,
            log_file=log_file,
            reference=reference,
            checkpoint_steps=found.all_steps,
            log_step_offset=log_offset,
        )
    except Exception as e:  # noqa: BLE001 -- re-raised below, once the summary of what was done is written
        judgement, failure = _unjudged(e), e
    timeline.save(out / "timeline.h5")  # with the scores the judgement raised its alarms on
    if not results:  # nothing to judge: say so rather than "healthy" (the exit code is 3)
        first = skipped_run[0] if skipped_run else skipped[0]
        judgement["verdict"] = dict(
            anomalous=False,
            earliest_step=None,
            confirmed_step=None,
            fault_type="inconclusive",
            confidence=0.0,
            evidence=[],
            reason=(
                f"not enough evidence: none of the {len(ckpts)} checkpoints could be read (first: {first.path}: "
                f"{first.reason})"
            ),
        )
    summary = {
        "schema": SCHEMA,
        "ckptscan_version": __version__,
        "run": str(run_dir),
        "out": str(out),
        "command": command if command is not None else list(sys.argv),
        "layout": layout_desc,
        "device": opts.device,
        "checkpoints": {
            "analyzed": len(results),
            "reused": sum(r.reused for r in results),
            "steps": [r.step for r in results],
            "skipped": [s.as_dict() for s in skipped],
            "framework": found.framework.name if found.framework else None,
            "run_folder": str(found.run_folder),
            "notes": [*found.notes, *_outside_note(results)],
        },
        "monitors": timeline.names(),
        "findings": findings,
        **judgement,
        "started_at": started,
        "elapsed_s": round(time.time() - t0, 3),
    }
    from ckptscan.report.data import outcome

    summary["outcome"] = outcome(summary).as_dict()
    result = Result(run_dir, out, summary, timeline, skipped)
    atomic_write(out / "summary.json", result.to_json())
    if failure is not None:
        raise failure
    return result


REMOTE_DIR = "remote"  # in an output folder: the mirror of a run at a URL (readers/remote.py)


def _analyze_url(url: str, cfg: AnalysisConfig, *, out_dir: str | Path | None, **kwargs) -> Result:
    """A run at a URL (``s3://bucket/run``, any fsspec URL): its tree mirrored inside the (local)
    output folder, weights as empty placeholders read at their URL with ranged reads
    (``readers/remote.py``), then analysed as a local run; what is shown names the URL (redacted)."""
    from ckptscan.readers import remote

    shown = remote.redact(url)
    if cfg.executor != "local":
        raise UsageError(f"{shown}: a run at a URL is analysed with --executor local (for now)")
    out = Path(out_dir) if out_dir is not None else default_out_dir(url, cfg.selection)
    check_outputs([cfg.baseline], out)
    holder = out / REMOTE_DIR / "url.txt"
    try:
        held = holder.read_text().strip()
    except OSError:
        held = None
    if held is not None and held != shown:
        raise UsageError(
            f"output folder {out} holds the results of another run ({held}); choose another with -o"
        )
    make_dir(out / REMOTE_DIR)
    atomic_write(holder, shown + "\n")
    mirror = out / REMOTE_DIR / "run"
    m = remote.mount(url, mirror, None)
    roots = sorted({str(mirror), str(mirror.resolve())}, key=len, reverse=True)

    def show(x):
        if isinstance(x, str):
            for r in roots:
                x = x.replace(r, shown)
            return x
        if isinstance(x, dict):
            return {k: show(v) for k, v in x.items()}
        if isinstance(x, list):
            return [show(v) for v in x]
        return x

    try:
        res = analyze(mirror, cfg, out_dir=out, **kwargs)
    except CkptscanError as e:
        e.args = tuple(show(a) for a in e.args)
        for attr in ("message", "path"):
            if isinstance(getattr(e, attr, None), (str, Path)):
                setattr(e, attr, show(str(getattr(e, attr))))
        raise
    finally:
        remote.unmount(m)
    res.summary = show(res.summary)
    res.summary["command"] = [remote.redact(a) if is_url(a) else a for a in res.summary["command"]]
    res.skipped = [Skipped(show(s.path), show(s.reason), s.error) for s in res.skipped]
    atomic_write(out / "summary.json", res.to_json())
    return res


def _reference(cfg: AnalysisConfig, out: Path) -> Reference:
    """The ``baseline`` run analysed with the same configuration (its results cached inside ``out``)."""
    baseline = cfg.baseline
    if baseline is None:  # callers ask for a reference only when a baseline run was given
        raise ValueError("no baseline run in this configuration")
    cache = baseline_out_dir(out, baseline)
    try:
        res = analyze(baseline, cfg.for_reference(), out_dir=cache)
    except CkptscanError as e:  # say which of the two runs it was
        raise type(e)(f"--baseline run: {e.message}", e.path if e.path is not None else baseline) from e
    return Reference(res.timeline, str(baseline), str(cache))


OWNER_FILE = "run.json"  # in an output folder: the run (resolved path) and checkpoint selection it holds


def _selection_words(selection: dict) -> str:
    words = [f"--{k.replace('_', '-')} {v}" for k, v in selection.items() if v is not None]
    return " ".join(words) or "all checkpoints"


def default_out_dir(run_dir: Path | str, selection: dict) -> Path:
    """``./ckptscan-out/<run-name>/``, with the selection in the name when there is one
    (``<run-name>.every-2``), and a hash of the run's path added when that folder already holds
    another run of the same name.  A run at a URL: its last path component, keyed by the URL."""
    from ckptscan.readers.remote import is_url, redact

    resolved: Path | str
    if is_url(run_dir):
        resolved = redact(str(run_dir)).rstrip("/")
        name = resolved.rsplit("/", 1)[-1] or "run"
    else:
        resolved = Path(run_dir).resolve()
        name = resolved.name
    for key, value in selection.items():
        if value is not None:
            text = str(value) if key != "step_regex" else hashlib.sha256(value.encode()).hexdigest()[:8]
            name += f".{key.replace('_', '-')}-" + "".join(c if c.isalnum() else "-" for c in text)
    base = Path.cwd() / "ckptscan-out" / name
    owner = _owner(base)
    if owner is None or owner.get("run") == str(resolved):
        return base
    return base.with_name(f"{name}-{hashlib.sha256(str(resolved).encode()).hexdigest()[:8]}")


def _owner(out: Path) -> dict | None:
    try:
        record = json.loads((out / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def claim_out_dir(out: Path, run_dir: Path, selection: dict) -> None:
    """An output folder holds one analysis: refuse one that holds another run's results, or this
    run's with another checkpoint selection (its summary and timeline would be replaced)."""
    owner = _owner(out)
    if owner is None:
        return
    if owner.get("run") != str(run_dir.resolve()):
        raise UsageError(
            f"output folder {out} holds the results of another run ({owner.get('run')}); "
            f"choose another with -o"
        )
    if owner.get("selection") != selection:
        held = _selection_words(owner.get("selection") or {})
        raise UsageError(
            f"output folder {out} holds the analysis of {held}; this one "
            f"({_selection_words(selection)}) would replace it: choose another with -o"
        )


def _unjudged(err: Exception) -> dict:
    """The judgement keys of a run whose judging failed (a bug, or a ``--baseline`` that cannot be
    analysed): no verdict, and why; the checkpoints' results are still summarised."""
    return {
        "verdict": {
            "anomalous": False,
            "earliest_step": None,
            "fault_type": "inconclusive",
            "confidence": 0.0,
            "evidence": [],
            "reason": f"the run could not be judged ({describe(err)})",
        },
        "loss": {"divergence_step": None, "log_only_alarm_step": None},
        "lead_time_steps": None,
    }


def _outside_note(results) -> list[str]:
    """One note listing the files read outside the run (through symlinks, HDF5 external storage)."""
    paths = sorted({p for r in results for p in r.outside})
    if not paths:
        return []
    more = f", and {len(paths) - 5} more" if len(paths) > 5 else ""
    return [
        (
            f"inputs outside the run ({len(paths)} read through symlinks or HDF5 external storage): "
            f"{', '.join(paths[:5])}{more}"
        )
    ]


def model_inputs(config_file, layout_file, heads, kv_heads) -> tuple[Path | None, Path | None, dict]:
    """``--config``/``--layout``/``--heads``/``--kv-heads`` checked: (layout file, config file, config
    overrides).  A ``--config`` TOML is a layout file; a JSON one must be a readable config.json."""
    layout_file, config_file = _config_or_layout(config_file, layout_file)
    return layout_file, config_file, _head_overrides(heads, kv_heads)


def _config_or_layout(config_file, layout_file) -> tuple[Path | None, Path | None]:
    if config_file is None:
        return layout_file, None
    config_file = Path(config_file)
    if not config_file.is_file():
        raise UsageError(f"--config {config_file}: no such file")
    if config_file.suffix == ".toml":
        if layout_file is not None:
            raise UsageError("--config FILE.toml is a layout file: give it or --layout, not both")
        return config_file, None
    try:
        load_config_file(config_file)
    except InputError as e:
        raise UsageError(f"--config {e}") from None
    return layout_file, config_file


def _head_overrides(heads: int | None, kv_heads: int | None) -> dict:
    """Config overrides (canonical keys) from ``--heads``/``--kv-heads`` (checked >= 1 by ``AnalysisConfig``)."""
    out = {}
    for key, value in (("num_attention_heads", heads), ("num_key_value_heads", kv_heads)):
        if value is not None:
            out[key] = value
    return out


def load_result(out_dir: str | Path) -> Result:
    """Re-open a stored result (``ckptscan report``) without recomputing anything.  A damaged
    ``summary.json`` or ``timeline.h5`` is an ``InputError`` naming that file."""
    from ckptscan.report.schema import validate

    out = Path(out_dir)
    summary_path = out / "summary.json"
    if not summary_path.is_file():
        raise UsageError(f"{out}: no summary.json here (is this a ckptscan output folder?)")
    try:
        summary = parse_json(summary_path.read_bytes())
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", summary_path) from None
    except JsonError as e:
        raise InputError(f"not a ckptscan summary: the file {e}", summary_path) from None
    problems = validate(summary)
    if problems:
        raise InputError(
            f"not a ckptscan summary ({len(problems)} problems; first: {problems[0]})", summary_path
        )
    if not isinstance(summary, dict):  # the schema's top level is an object: passing it makes one
        raise InputError("not a ckptscan summary (not a JSON object)", summary_path)
    if not (out / "timeline.h5").is_file():
        raise InputError(
            "missing: the analysis that wrote summary.json stored no timeline here (re-run ckptscan analyze)",
            out / "timeline.h5",
        )
    try:
        timeline = Timeline.load(out / "timeline.h5")
    except Exception as e:  # noqa: BLE001 -- a damaged HDF5 file fails in many ways: named, never a crash
        raise InputError(f"not a readable ckptscan timeline ({describe(e)})", out / "timeline.h5") from None
    skipped = [
        Skipped(s["path"], s["reason"], s.get("error", True)) for s in summary["checkpoints"]["skipped"]
    ]
    return Result(Path(summary["run"]), out, summary, timeline, skipped)
