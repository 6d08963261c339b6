"""Training logs -> loss curve, loss-divergence step, and the log-only spike detector.

This is the yardstick the checkpoint monitors must beat: what a team sees today from its loss and
grad-norm curves.  Three pieces:

* ``find_log`` / ``read_log``: the loss curve of a run, from HF ``trainer_state.json``
  (``log_history``; its end-of-training summary record is not a step's loss), JSON lines
  (``metrics.jsonl`` or any ``*.jsonl``: objects with ``step`` and ``loss``, optional ``grad_norm``
  and ``lr``/``learning_rate``), CSV with those columns (Lightning's ``metrics.csv``), or TensorBoard
  event files (read with the ``tensorboard`` package, an optional extra).  Where a framework's tree
  was recognised, its own log locations are searched first (``ckptscan/discover/frameworks.py``).  A bad
  line is skipped with a note; reading a log never raises on its content.
* ``divergence_step``: when the loss diverged (the drills' ``divergence_step`` uses the same rule).
* ``log_only_alarm``: the spike rule of OLMo-core's stability monitor (a loss or grad-norm value
  above mean + 6 sigma of the previous 128 logged values, once 128 are there, never on a flat
  window); its first alarm is the log-only detector's answer.

A JSON ``null`` loss counts as non-finite: trainers (and the drills) write ``null`` where the value
was NaN/Inf because strict JSON has no NaN.
"""

from __future__ import annotations

import csv
import fnmatch
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ckptscan.discover.checkpoints import CONTAINER_DIRS, glob_under
from ckptscan.errors import describe
from ckptscan.limits import JsonError, as_step, parse_json

# --- the divergence rule (shared with ckptscan/drills; documented in docs/detection.md) ----------
EMA_BETA = 0.9  # smoothing of the loss: ema_t = beta * ema_{t-1} + (1 - beta) * loss_t
DIVERGENCE_MARGIN = 1.0  # nats above the running minimum of the EMA

# --- the log-only spike rule ----------------------------------------------------------------------
SPIKE_WINDOW = 128  # previous values the mean and std are taken over
SPIKE_SIGMAS = 6.0
SPIKE_MIN_STD = 1e-10  # no alarm where the window's std is below this (a flat window)
MAX_LISTED_ALARMS = 200  # summary.json lists at most this many log-only alarm steps

STEP_KEYS = ("step", "global_step", "iteration", "iter", "_step")
LOSS_KEYS = (
    "loss",
    "train_loss",
    "train/loss",
    "lm_loss",
    "train/ce_loss",
    "train_loss_step",
    "reduced_train_loss",
)
GRAD_KEYS = ("grad_norm", "gradient_norm", "train/grad_norm", "optim/total_grad_norm")
LR_KEYS = ("lr", "learning_rate", "train/learning_rate", "optim/LR (group 0)")
# TensorBoard scalar tags, first present wins: the keys above, then Megatron's and torchtitan's tags
TB_LOSS_TAGS = LOSS_KEYS + ("lm loss", "loss_metrics/global_avg_loss")
TB_GRAD_TAGS = GRAD_KEYS + ("grad-norm",)
TB_LR_TAGS = LR_KEYS + ("learning-rate",)
TB_EVENTS = "events.out.tfevents.*"
TB_MISSING = (
    "TensorBoard event files need the 'tensorboard' package: pip install 'ckptscan[tensorboard]', "
    "or pass --log with a JSONL/CSV log"
)
# HF Trainer's end-of-training record (mean train_loss, runtime...): not the loss of its step
TRAINER_SUMMARY_KEYS = ("train_runtime", "train_samples_per_second")

LOG_NAMES = ("metrics.jsonl", "log.jsonl", "train.jsonl", "metrics.csv", "log.csv", "progress.csv")


@dataclass
class LossCurve:
    """A run's logged curve, sorted by step, one point per step (a re-logged step keeps its last value)."""

    path: Path | None
    steps: np.ndarray  # int64 [n]
    loss: np.ndarray  # float64 [n]; NaN/Inf where the logged loss was not finite
    grad_norm: np.ndarray | None = None  # float64 [n] or None when the log has none
    lr: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.steps)


# =================================================================================================
# rules


def divergence_step(
    steps, losses, *, beta: float = EMA_BETA, margin: float = DIVERGENCE_MARGIN
) -> int | None:
    """First step where the loss is NaN/Inf, or its EMA exceeds the running minimum of the EMA by
    ``margin`` nats; ``None`` if that never happens.

    Why this rule: a diverging run either produces a non-finite loss or climbs away from the best
    loss it reached and does not come back within the smoothing time (1 / (1 - beta) = 10 logged
    points).  The EMA keeps a single noisy batch from counting; the margin (1 nat, a factor e in
    perplexity) is far above the step-to-step noise of any run that trains.  ``None`` entries
    (JSON null) count as non-finite.
    """
    ema = None
    best = math.inf
    for s, loss in zip(steps, losses, strict=False):
        loss = math.nan if loss is None else float(loss)
        if not math.isfinite(loss):
            return int(s)
        ema = loss if ema is None else beta * ema + (1 - beta) * loss
        best = min(best, ema)
        if ema > best + margin:
            return int(s)
    return None


def lasting_divergence_step(steps, losses) -> int | None:
    """``divergence_step`` with a lone non-finite loss passed over: a NaN/Inf (or JSON null) loss
    whose next logged loss is finite does not count (a skipped step of a run with dynamic loss
    scaling logs one and trains on); two in a row, or one as the last logged value, do.  What the
    verdict's ``unknown/loss-diverged`` path reads (``classify``); the divergence step reported
    beside it is ``divergence_step``'s."""
    vals = [math.nan if v is None else float(v) for v in losses]
    keep = [
        math.isfinite(v) or i + 1 == len(vals) or not math.isfinite(vals[i + 1]) for i, v in enumerate(vals)
    ]
    return divergence_step(
        [s for s, k in zip(steps, keep, strict=True) if k], [v for v, k in zip(vals, keep, strict=True) if k]
    )


def spike_alarms(
    values, *, window: int = SPIKE_WINDOW, sigmas: float = SPIKE_SIGMAS, min_std: float = SPIKE_MIN_STD
) -> np.ndarray:
    """Boolean mask: value i is above mean + ``sigmas`` * std (population) of the ``window`` logged
    values before it.  As OLMo-core's stability monitor does it: no alarm until the window is full,
    none where the window's std is below ``min_std``, and every logged value enters the window,
    spikes included.  A NaN is never an alarm (the divergence rule owns it); +inf is above any finite
    threshold and alarms, as it does there.  A non-finite value keeps the windows it enters from
    alarming.
    """
    v = np.asarray(values, dtype=np.float64)
    out = np.zeros(len(v), dtype=bool)
    if len(v) <= window:
        return out
    hist = np.lib.stride_tricks.sliding_window_view(v[:-1], window)  # row j = values j .. j+window-1
    with np.errstate(invalid="ignore", over="ignore"):
        mean = hist.mean(axis=1)
        std = hist.std(axis=1)
        out[window:] = (std >= min_std) & (v[window:] > mean + sigmas * std)
    return out


def log_only_alarm_steps(curve: LossCurve, **kw) -> list[int]:
    """Every step where loss or grad norm trips the spike rule (``spike_alarms``), ascending.

    Each series is windowed over its own values: a step whose grad norm is missing (or null) is
    not one of them."""
    mask = spike_alarms(curve.loss, **kw)
    if curve.grad_norm is not None:
        logged = ~np.isnan(curve.grad_norm)
        mask[logged] |= spike_alarms(curve.grad_norm[logged], **kw)
    return [int(s) for s in curve.steps[np.flatnonzero(mask)]]


def log_only_alarm(curve: LossCurve, **kw) -> int | None:
    """First step where loss or grad norm trips the spike rule; ``None`` if never."""
    steps = log_only_alarm_steps(curve, **kw)
    return steps[0] if steps else None


# =================================================================================================
# finding and reading


def find_log(
    run_dir: str | Path, log_file: str | Path | None = None, patterns: tuple[str, ...] = ()
) -> Path | None:
    """The run's training log: ``log_file`` if given; else the first of ``patterns`` (a framework's log
    globs, relative to the run folder) that matches; else the newest ``trainer_state.json`` (the run
    root's or a checkpoint folder's, whichever logs the later step), else a metrics JSONL/CSV file or
    TensorBoard event files at the run root.  A run folder named like a checkpoint container
    (``checkpoints/``) is searched, then its parent.  ``None`` when the run has no log.

    For TensorBoard the folder holding the newest event file is returned: all its event files are read
    (a resumed run writes one file per restart).  A folder that cannot be searched (no permission)
    is passed over."""
    if log_file is not None:
        return Path(log_file)
    try:
        return _search_log(Path(run_dir), patterns)
    except OSError:
        return None


def _search_log(run: Path, patterns: tuple[str, ...]) -> Path | None:
    if not run.is_dir():
        return None
    for pattern in patterns:
        if Path(pattern).name == "trainer_state.json":
            found = _trainer_state_log(run)
        else:
            found = _newest(glob_under(run, pattern))
        if found is not None:
            return found
    folders = [run, run.parent] if run.name in CONTAINER_DIRS else [run]
    for folder in folders:
        found = _trainer_state_log(folder) or _generic_log(folder)
        if found is not None:
            return found
    return None


def _newest(paths: list[Path]) -> Path | None:
    files = [p for p in paths if os.path.isfile(p)]  # False, not an error, where we may not look
    if not files:
        return None
    events = [p for p in files if fnmatch.fnmatch(p.name, TB_EVENTS)]
    if events:
        return max(events, key=lambda p: (p.stat().st_mtime, p.name)).parent
    return min(files)


def _trainer_state_log(run: Path) -> Path | None:
    states = []
    if os.path.isfile(run / "trainer_state.json"):
        states.append((_last_logged_step(run / "trainer_state.json"), 1, run / "trainer_state.json"))
    ck = []
    for sub in _listing(run):
        p = sub / "trainer_state.json"
        if os.path.isdir(sub) and os.path.isfile(p):
            nums = re.findall(r"\d+", sub.name)
            ck.append((int(nums[-1]) if nums else -1, p))
    if ck:
        newest = max(ck)[1]
        states.append((_last_logged_step(newest), 0, newest))
    return max(states)[2] if states else None


def _generic_log(run: Path) -> Path | None:
    for name in LOG_NAMES:
        if os.path.isfile(run / name):
            return run / name
    for pattern in ("*.jsonl", "*.csv"):
        cands = sorted(run.glob(pattern))
        if cands:
            return cands[0]
    return _newest(list(run.glob(TB_EVENTS)))


def _listing(folder: Path) -> list[Path]:
    """The entries of a folder; none when it cannot be listed (the log search is best effort)."""
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def _last_logged_step(path: Path) -> int:
    try:
        st: Any = parse_json(path.read_bytes())  # any JSON: a wrong shape raises, caught below
        step = st.get("global_step") or max(e.get("step", -1) for e in st["log_history"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):  # JsonError is a ValueError
        return -1  # unreadable: ranked last, read_log will say what is wrong
    n = as_step(step)
    return -1 if n is None else n


def read_log(path: str | Path) -> LossCurve:
    """Read a log file (format from its name/content).  Unreadable files give an empty curve with a
    note; bad lines are skipped with a note (at most a few are named, then counted).  This is the
    log's containment boundary: whatever its content does to a parser, the result is a note."""
    path = Path(path)
    notes: list[str] = []
    try:
        return _read_log(path, notes)
    except OSError as e:
        notes.append(f"{path}: cannot read ({e.strerror or e})")
    except Exception as e:  # noqa: BLE001 -- any failure on a log's content is a note, never a crash
        notes.append(f"{path}: not read ({describe(e)})")
    return LossCurve(path, np.zeros(0, np.int64), np.zeros(0), notes=notes)


def _read_log(path: Path, notes: list[str]) -> LossCurve:
    if path.is_dir() or fnmatch.fnmatch(path.name, TB_EVENTS):
        return _curve(path, _rows_tensorboard(path, notes), notes)
    text = path.read_text(errors="replace")
    if path.suffix == ".csv":
        rows = _rows_csv(text, path, notes)
    elif path.suffix == ".json":
        rows = _rows_trainer_state(text, path, notes)
    else:
        rows = _rows_jsonl(text, path, notes)
    return _curve(path, rows, notes)


def load_curve(
    run_dir: str | Path, log_file: str | Path | None = None, patterns: tuple[str, ...] = ()
) -> LossCurve | None:
    """``read_log(find_log(...))``, or ``None`` when the run has no log."""
    p = find_log(run_dir, log_file, patterns)
    if p is None:
        return None
    return read_log(p)


# --- row parsers: each yields dicts {step, loss, grad_norm?, lr?} with floats (NaN for non-finite)


class _Bad(ValueError):
    pass


def _num(v, *, null_is_nan: bool) -> float | None:
    """A logged number: float, or NaN for null/"nan"/"inf" strings; None when absent/garbage."""
    if v is None:
        return math.nan if null_is_nan else None
    if isinstance(v, bool):
        raise _Bad("boolean where a number was expected")
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        s = v.strip()
        if s == "":
            return None
        try:
            return float(s)
        except ValueError:
            raise _Bad(f"not a number: {s[:20]!r}") from None
    raise _Bad(f"not a number: {type(v).__name__}")


def _pick(obj: dict, keys) -> tuple[bool, object]:
    for k in keys:
        if k in obj:
            return True, obj[k]
    return False, None


def _row(obj: dict, *, null_is_nan: bool) -> dict | None:
    """A log record -> row, or None if it carries no training loss (eval lines, summaries)."""
    has_step, step = _pick(obj, STEP_KEYS)
    has_loss, loss = _pick(obj, LOSS_KEYS)
    if not has_loss:
        return None
    if not has_step:
        raise _Bad("loss without a step")
    st = as_step(_num(step, null_is_nan=False))
    if st is None:
        raise _Bad(f"bad step {str(step)[:40]!r}")
    lv = _num(loss, null_is_nan=null_is_nan)
    if lv is None:
        return None
    row = {"step": st, "loss": lv}
    for key, names in (("grad_norm", GRAD_KEYS), ("lr", LR_KEYS)):
        ok, v = _pick(obj, names)
        if ok:
            try:
                x = _num(v, null_is_nan=True)
            except _Bad:
                x = None
            if x is not None:
                row[key] = x
    return row


class _NoteSink:
    """Collects per-line problems: names the first few, counts the rest."""

    def __init__(self, path: Path, notes: list[str], limit: int = 5):
        self.path, self.notes, self.limit, self.n = path, notes, limit, 0

    def add(self, where: str, why: str) -> None:
        self.n += 1
        if self.n <= self.limit:
            self.notes.append(f"{self.path.name} {where}: skipped ({why})")

    def close(self) -> None:
        if self.n > self.limit:
            self.notes.append(f"{self.path.name}: {self.n - self.limit} more bad lines skipped")


def _rows_jsonl(text: str, path: Path, notes: list[str]) -> list[dict]:
    sink, rows = _NoteSink(path, notes), []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = parse_json(line)
            if not isinstance(obj, dict):
                raise _Bad("not a JSON object")
            r = _row(obj, null_is_nan=True)
        except JsonError as e:
            sink.add(f"line {i}", "invalid JSON" if "not valid JSON" in str(e) else f"JSON {e}")
            continue
        except _Bad as e:
            sink.add(f"line {i}", str(e))
            continue
        if r is not None:
            rows.append(r)
    sink.close()
    return rows


def _rows_trainer_state(text: str, path: Path, notes: list[str]) -> list[dict]:
    try:
        st: Any = parse_json(text)  # any JSON: a wrong shape raises, caught below
        hist = st["log_history"]
        if not isinstance(hist, list):
            raise TypeError
    except (JsonError, KeyError, TypeError):
        # maybe JSON lines with a .json name
        rows = _rows_jsonl(text, path, notes)
        if not rows:
            notes.append(f"{path.name}: not a trainer_state.json (no log_history) and no JSON lines")
        return rows
    sink, rows = _NoteSink(path, notes), []
    for i, obj in enumerate(hist):
        try:
            if not isinstance(obj, dict):
                raise _Bad("not an object")
            if any(k in obj for k in TRAINER_SUMMARY_KEYS):
                continue
            r = _row(obj, null_is_nan=True)
        except _Bad as e:
            sink.add(f"log_history[{i}]", str(e))
            continue
        if r is not None:
            rows.append(r)
    sink.close()
    return rows


def _rows_csv(text: str, path: Path, notes: list[str]) -> list[dict]:
    sink, rows = _NoteSink(path, notes), list[dict]()
    try:
        reader = csv.DictReader(text.splitlines())
        fields = reader.fieldnames or []
    except csv.Error as e:
        notes.append(f"{path.name}: not CSV ({e})")
        return rows
    if not any(k in fields for k in LOSS_KEYS):
        notes.append(f"{path.name}: no loss column (looked for {', '.join(LOSS_KEYS)})")
        return rows
    try:
        for i, rec in enumerate(reader, 2):
            try:
                if None in rec:  # more cells than header fields
                    raise _Bad("too many cells")
                r = _row({k: v for k, v in rec.items() if k is not None}, null_is_nan=False)
            except _Bad as e:
                sink.add(f"line {i}", str(e))
                continue
            if r is not None:
                rows.append(r)
    except csv.Error as e:
        notes.append(f"{path.name}: CSV error, rest of file skipped ({e})")
    sink.close()
    return rows


def _rows_tensorboard(path: Path, notes: list[str]) -> list[dict]:
    """Scalars of TensorBoard event files (a file, or every event file of a folder, in order; a
    restart that goes back in steps drops the orphaned later points, as TensorBoard does)."""
    try:
        from tensorboard.backend.event_processing import event_accumulator as ea
        from tensorboard.util import tensor_util
    except ImportError:
        notes.append(f"{path}: {TB_MISSING}")
        return []
    acc = ea.EventAccumulator(str(path), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    try:
        acc.Reload()
    except Exception as e:  # noqa: BLE001 -- a damaged event file: a note, never a crash
        notes.append(f"{path.name}: not readable as TensorBoard events ({type(e).__name__}: {e})")
        return []
    series: dict[str, dict[int, float]] = {}
    tags = acc.Tags()
    for tag in tags.get(ea.SCALARS, []):
        series[tag] = {int(e.step): float(e.value) for e in acc.Scalars(tag)}
    for tag in tags.get(ea.TENSORS, []):
        vals = {int(e.step): tensor_util.make_ndarray(e.tensor_proto) for e in acc.Tensors(tag)}
        if vals and all(v.size == 1 for v in vals.values()):
            series.setdefault(tag, {s: float(v.reshape(-1)[0]) for s, v in vals.items()})
    loss_tag = next((t for t in TB_LOSS_TAGS if t in series), None)
    if loss_tag is None:
        notes.append(f"{path.name}: no loss scalar among its tags (looked for {', '.join(TB_LOSS_TAGS)})")
        return []
    extra = {
        key: next((series[t] for t in names if t in series), {})
        for key, names in (("grad_norm", TB_GRAD_TAGS), ("lr", TB_LR_TAGS))
    }
    rows = []
    for step, loss in sorted(series[loss_tag].items()):
        row = {"step": step, "loss": loss}
        row.update({k: v[step] for k, v in extra.items() if step in v})
        rows.append(row)
    return rows


def _curve(path: Path, rows: list[dict], notes: list[str]) -> LossCurve:
    by_step: dict[int, dict] = {}
    for r in rows:  # a re-logged step (resume after restart) keeps its last record
        by_step[r["step"]] = r
    steps = sorted(by_step)
    n = len(steps)
    loss = np.array([by_step[s]["loss"] for s in steps], dtype=np.float64) if n else np.zeros(0)

    def col(key):
        if not any(key in by_step[s] for s in steps):
            return None
        return np.array([by_step[s].get(key, math.nan) for s in steps], dtype=np.float64)

    if len(rows) != n:
        notes.append(f"{path.name}: {len(rows) - n} re-logged steps; kept the last record of each")
    return LossCurve(path, np.asarray(steps, dtype=np.int64), loss, col("grad_norm"), col("lr"), notes)


def alignment_problem(log_steps, checkpoint_steps) -> str | None:
    """Why the checkpoints' steps cannot be compared with the log's steps (one line), or ``None``.

    Checkpoints are saved along the run the log records: the newest one lies within two save
    intervals (at least a tenth of the logged span) of the log's last step, and none lies more than
    one save interval past it.  Steps that count saves (accelerate's automatic ``checkpoint_<i>``), or
    a log from another run, fail this."""
    c = np.unique(np.asarray(checkpoint_steps, dtype=np.int64))
    logged = np.asarray(log_steps, dtype=np.int64)
    if len(c) == 0 or len(logged) == 0:
        return None
    gap = int(np.median(np.diff(c))) if len(c) > 1 else max(int(c[0]), 1)
    first, last = int(logged.min()), int(logged.max())
    if c[-1] <= last + gap and last - c[-1] <= max(2 * gap, (last - first) / 10):
        return None
    return (
        f"checkpoint steps {c[0]}..{c[-1]} and logged steps {first}..{last} cannot be aligned (the "
        f"checkpoints' numbers may count saves, or the log is another run's): lead time not reported"
    )


# =================================================================================================
# summary


def summarize(run_dir: str | Path, log_file: str | Path | None = None, step_offset: int = 0) -> dict:
    """The ``loss`` part of summary.json plus the curve itself (``curve`` key, not serialised).

    ``step_offset`` is added to the logged steps (a framework whose logger records the step before it
    is taken, ``frameworks.Framework.log_step_offset``), so that they count what a checkpoint counts."""
    curve = load_curve(run_dir, log_file)
    if curve is not None and step_offset and len(curve):
        assert curve.path is not None  # load_curve's curves come from read_log, which names their file
        curve.steps = curve.steps + step_offset
        curve.notes.append(
            f"{curve.path.name}: logged steps shifted by {step_offset:+d} to count completed "
            f"optimizer steps, as the checkpoints do"
        )
    if curve is None:
        return {
            "curve": None,
            "log": {"path": None, "points": 0, "notes": ["no training log found"]},
            "divergence_step": None,
            "log_only_alarm_step": None,
            "log_only_alarm_steps": [],
        }
    div = divergence_step(curve.steps.tolist(), curve.loss.tolist()) if len(curve) else None
    alarms = log_only_alarm_steps(curve) if len(curve) else []
    alarm = alarms[0] if alarms else None
    first, last = (int(curve.steps[0]), int(curve.steps[-1])) if len(curve) else (None, None)
    return {
        "curve": curve,
        "log": {
            "path": str(curve.path),
            "points": len(curve),
            "first_step": first,
            "last_step": last,
            "has_grad_norm": curve.grad_norm is not None,
            "has_lr": curve.lr is not None,
            "step_offset": step_offset,
            "notes": curve.notes,
        },
        "divergence_step": div,
        "log_only_alarm_step": alarm,
        # every alarm up to the divergence (and the first one after it): ``ckptscan eval`` needs the
        # first alarm at/after a fault's onset, not just the first alarm of the run
        "log_only_alarm_steps": [s for s in alarms if div is None or s <= div][:MAX_LISTED_ALARMS]
        + [s for s in alarms if div is not None and s > div][:1],
    }
