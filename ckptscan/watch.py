"""``ckptscan watch``: follow a run while its checkpoints land (docs/live.md).

Each poll lists the run's checkpoints (``discover``), decides which ones are finished
(``is_complete``: what the files themselves say) and settled (the same names, sizes and mtimes as at
the previous poll), and hands the finished prefix (every checkpoint up to the first unfinished one)
to ``ckptscan.api.analyze`` with the same output folder every round: the store is resumable, so a
round computes the new checkpoints only and re-judges the run.  When the verdict carries a
``confirmed_step`` the alarm is raised once: a line on stderr, the status file, the ``--on-alarm``
command.  The run is only read; every write goes to the output folder and the status file.

Nothing here decides what is anomalous: the verdict is ``analyze``'s, on the checkpoints finished
so far.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ckptscan.discover.checkpoints import compile_step_regex, discover_run, parse_step, parse_steps_range
from ckptscan.errors import EXIT_ANOMALY, EXIT_HEALTHY, EXIT_INCONCLUSIVE, CkptscanError, printable
from ckptscan.store.timeline import atomic_write

if TYPE_CHECKING:
    from ckptscan.api import Result

STATUS_FILE = "watch.json"  # default status file, in the output folder
STATUS_SCHEMA = "ckptscan-watch/1"
MAX_FILES = 10_000  # files fingerprinted per checkpoint folder (a bigger folder: the first ones)
HOOK_OUTPUT_LINES = 20  # lines of the hook's output repeated on stderr
# discovery's reasons for a checkpoint that is still being written
_UNFINISHED = ("incomplete checkpoint", "no checkpoint weights found")


# --- is a checkpoint finished? ---------------------------------------------------------------------


def is_complete(path: str | Path, *, hf_trainer: bool = False) -> tuple[bool, str]:
    """Was this checkpoint (folder or file) fully written?  ``(True, "")`` or ``(False, reason)``.

    Reads directory entries, file sizes and headers only.  On top of the readers' checks
    (``ckptscan.readers.is_complete``: every shard the safetensors index names is there and each
    file's header parses with all its tensors inside the file; a DCP folder has its ``.metadata``
    and data files as long as it says; a torch zip file has its central directory; ZeRO-3 has as
    many optimizer as model-state files):

    * what a format says a writer leaves while busy (``Format.unfinished``): safetensors shards
      without their index (``save_pretrained`` writes the index last; with the index there, the
      readers check that every shard it names is);
    * a Hugging Face Trainer checkpoint (``hf_trainer``, or a folder holding ``training_args.bin``)
      is finished once its ``trainer_state.json`` is there (the Trainer writes it last);
    * a DeepSpeed ``global_stepN`` / Megatron ``iter_N`` folder is unfinished while the tracker file
      beside it (``latest`` / ``latest_checkpointed_iteration.txt``) names an older step.

    Whether the files have stopped changing is the caller's part (two polls, ``fingerprint``).
    """
    from ckptscan.readers import detect_format
    from ckptscan.readers import is_complete as readers_complete

    path = Path(path)
    try:
        if path.is_dir():
            names = set(os.listdir(path))
            why = _folder_unfinished(path, names, hf_trainer)
            if why:
                return False, why
        elif not path.is_file():
            return False, "not there (yet)"
        if detect_format(path) is None:
            return False, "no weights in it yet"
        return readers_complete(path)
    except OSError as e:  # removed or renamed under us: not finished, looked at again next poll
        return False, f"cannot read it yet: {e.strerror or e}"


def _folder_unfinished(path: Path, names: set[str], hf_trainer: bool) -> str:
    from ckptscan.readers.registry import FORMATS

    for fmt in FORMATS:
        why = fmt.unfinished(names)
        if why:
            return why
    if (hf_trainer or "training_args.bin" in names) and "trainer_state.json" not in names:
        return "no trainer_state.json yet (the Hugging Face Trainer writes it last)"
    tracked = _tracker_step(path)
    step = parse_step(path.name)
    if tracked is not None and step is not None and tracked < step:
        return f"the run's tracker file still names step {tracked} (written once a save is done)"
    return ""


def _tracker_step(path: Path) -> int | None:
    """The step named by DeepSpeed's ``latest`` or Megatron's ``latest_checkpointed_iteration.txt``
    beside a checkpoint folder, when there is one."""
    for name in ("latest", "latest_checkpointed_iteration.txt"):
        f = path.parent / name
        try:
            if not f.is_file() or f.stat().st_size > 256:
                continue
            text = f.read_text(errors="replace").strip()
        except OSError:
            continue
        step = parse_step(text) if not text.isdigit() else int(text)
        if step is not None:
            return step
    return None


Fingerprint = tuple[tuple[str, int, int], ...]


def fingerprint(path: str | Path) -> Fingerprint:
    """(relative name, size, mtime in ns) of every file of a checkpoint, sorted; ``()`` when it is
    gone.  Two equal fingerprints one poll apart: nobody is writing it."""
    path = Path(path)
    try:
        if not path.is_dir():
            st = path.stat()
            return ((path.name, st.st_size, st.st_mtime_ns),)
        out = []
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                p = Path(root, name)
                try:
                    st = p.lstat()
                except OSError:
                    continue
                out.append((str(p.relative_to(path)), st.st_size, st.st_mtime_ns))
                if len(out) >= MAX_FILES:
                    return tuple(out)
        return tuple(out)
    except OSError:
        return ()


def landed_at(fp: Fingerprint) -> float | None:
    """When a checkpoint's last file was written (seconds since the epoch), from its fingerprint."""
    return max(m for _, _, m in fp) / 1e9 if fp else None


# --- one look at the run ---------------------------------------------------------------------------


@dataclass
class Entry:
    """One checkpoint of the run as the watcher saw it."""

    path: Path
    step: int | None
    fp: Fingerprint
    changed_at: float  # monotonic time its fingerprint last changed (or it appeared)
    complete: bool = False
    reason: str = ""
    ready: bool = False  # complete, and unchanged since the previous poll
    abandoned: bool = False  # unfinished, unchanged for --stale seconds, with a later one finished


@dataclass
class Scan:
    entries: list[Entry]
    temporary: list[str]  # unfinished writes under temporary names (no step yet)
    frontier: int | None  # the last step of the finished prefix

    @property
    def pending(self) -> list[Entry]:
        return [e for e in self.entries if not e.ready and not e.abandoned]


# --- the loop --------------------------------------------------------------------------------------


@dataclass
class WatchOptions:
    poll: float = 10.0
    idle: float | None = None
    until: int | None = None
    stale: float = 600.0
    on_alarm: str | None = None
    hook_timeout: float = 300.0
    exit_on_alarm: bool = False
    analyze_kwargs: dict = field(default_factory=dict)  # passed to ckptscan.api.analyze every round


@dataclass
class Outcome:
    reason: str  # "alarm" (--exit-on-alarm), "until", "idle", "interrupted"
    result: Result | None  # the last round's, None when nothing was analysed
    alarm: dict | None


def now_iso(t: float | None = None) -> str:
    return (
        datetime.fromtimestamp(time.time() if t is None else t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4]
        + "Z"
    )


class Watcher:
    """Follows ``run_dir``; ``run()`` returns when told to stop.  ``echo(line)`` prints a line to
    stderr (each starts with ``ckptscan``), ``progress`` whether round lines are printed."""

    def __init__(
        self,
        run_dir: Path,
        out_dir: Path,
        status_file: Path,
        opts: WatchOptions,
        echo: Callable[[str], None],
        progress: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.run_dir, self.out_dir, self.status_file, self.opts = (
            Path(run_dir),
            Path(out_dir),
            Path(status_file),
            opts,
        )
        self.echo, self.progress, self.clock, self.sleep = echo, progress, clock, sleep
        self.entries: dict[Path, Entry] = {}
        self.started = time.time()
        self.last_news = clock()  # the last time a checkpoint appeared, changed or was finished
        self.rounds = 0
        self.analysed_key: tuple | None = None
        self.result: Result | None = None
        self.alarm: dict | None = None
        self.scan_: Scan | None = None
        kw = opts.analyze_kwargs
        self._pattern = compile_step_regex(kw.get("step_regex"))
        self._range = parse_steps_range(kw.get("steps"))

    # a poll
    def scan(self) -> Scan:
        found = discover_run(self.run_dir, step_regex=self._pattern, steps=self._range)
        hf = found.framework is not None and found.framework.name == "hf-trainer"
        seen: list[tuple[int | None, Path]] = [(c.step, c.path) for c in found.checkpoints]
        temporary = []
        lo, hi = self._range
        for sk in found.skipped:
            if sk.reason.startswith(_UNFINISHED):
                step = parse_step(Path(sk.path).name, self._pattern)
                if step is None or not (lo is not None and step < lo or hi is not None and step > hi):
                    seen.append((step, Path(sk.path)))
            elif not sk.error and not sk.reason.startswith("copy of"):  # a temporary name
                temporary.append(sk.path)
        now = self.clock()
        entries = []
        for step, path in seen:
            fp = fingerprint(path)
            prev = self.entries.get(path)
            changed = prev is None or prev.fp != fp
            e = Entry(path, step, fp, now if prev is None or changed else prev.changed_at)
            if prev is None or changed or not prev.complete:  # the files' evidence is re-read when they moved
                e.complete, e.reason = is_complete(path, hf_trainer=hf)
            else:
                e.complete = True
            e.ready = e.complete and not changed and e.step is not None
            if changed or (e.ready and not (prev and prev.ready)):
                self.last_news = now
            entries.append(e)
        self.entries = {e.path: e for e in entries}
        if set(temporary) - set(self.scan_.temporary if self.scan_ else []):
            self.last_news = now  # a new write under a temporary name
        ready_steps = [e.step for e in entries if e.ready and e.step is not None]
        for e in entries:  # unfinished, left alone for --stale seconds while later ones were finished
            e.abandoned = (
                not e.ready
                and e.step is not None
                and now - e.changed_at >= self.opts.stale
                and any(s > e.step for s in ready_steps)
            )
        blocking = [e.step for e in entries if e.step is not None and not e.ready and not e.abandoned]
        limit = min(blocking, default=None)
        finished = [s for s in ready_steps if limit is None or s < limit]
        self.scan_ = Scan(entries, temporary, max(finished, default=None))
        return self.scan_

    # a round: analyse the finished prefix when it changed
    def analyse(self, scan: Scan):
        from ckptscan.api import analyze

        if scan.frontier is None:
            return None
        key = tuple(
            sorted((e.step, e.fp) for e in scan.entries if e.step is not None and e.step <= scan.frontier)
        )
        if key == self.analysed_key:
            return None
        self.result = analyze(
            self.run_dir, out_dir=self.out_dir, until_step=scan.frontier, **self.opts.analyze_kwargs
        )
        self.analysed_key = key
        self.rounds += 1
        return self.result

    def run(self) -> Outcome:
        self.write_status("watching")
        reason = None
        try:
            while reason is None:
                scan = self.scan()
                result = self.analyse(scan)
                if result is not None:
                    self.report_round(scan, result)
                    if self.alarm is None and _confirmed(result):
                        self.raise_alarm(scan, result)
                        if self.opts.exit_on_alarm:
                            reason = "alarm"
                            break
                self.write_status("alarm" if self.alarm else "watching")
                if (
                    self.opts.until is not None
                    and scan.frontier is not None
                    and scan.frontier >= self.opts.until
                    and self.analysed_key is not None
                ):
                    reason = "until"
                elif (
                    self.opts.idle is not None
                    and result is None
                    and not self.settling(scan)
                    and self.clock() - self.last_news >= self.opts.idle
                ):  # (a round's own time is no idle time)
                    reason = "idle"
                else:
                    self.sleep(self.opts.poll)
        except KeyboardInterrupt:
            reason = "interrupted"
        except CkptscanError as e:
            self.write_status("stopped", stop_reason=f"error: {e}")
            raise
        self.write_status("stopped", stop_reason=reason)
        return Outcome(reason, self.result, self.alarm)

    def settling(self, scan: Scan) -> bool:
        """A checkpoint still being written (changed less than ``--stale`` seconds ago) or finished
        but not yet seen unchanged twice: ``--idle`` waits for it."""
        now = self.clock()
        return any(e.complete and not e.ready or now - e.changed_at < self.opts.stale for e in scan.pending)

    # what it says
    def report_round(self, scan: Scan, result) -> None:
        if not self.progress:
            return
        n = len((result.summary.get("checkpoints") or {}).get("steps") or [])
        waiting = f", {len(scan.pending)} unfinished" if scan.pending else ""
        headline = (result.summary.get("outcome") or {}).get("headline", "")
        self.echo(
            f"ckptscan: watch: analysed up to step {scan.frontier} ({n} checkpoints{waiting}): "
            f"{printable(headline)}"
        )

    def raise_alarm(self, scan: Scan, result) -> None:
        v = result.verdict
        confirmed = v.get("confirmed_step")
        entry = next((e for e in scan.entries if e.step == confirmed), None)
        landed = landed_at(entry.fp) if entry is not None else None
        raised = time.time()
        self.alarm = {
            "fault_type": v.get("fault_type"),
            "earliest_step": v.get("earliest_step"),
            "confirmed_step": confirmed,
            "confidence": v.get("confidence"),
            "analysed_up_to_step": scan.frontier,
            "divergence_step": (result.summary.get("loss") or {}).get("divergence_step"),
            "raised_at": now_iso(raised),
            "checkpoint_landed_at": None if landed is None else now_iso(landed),
            "seconds_after_landing": None if landed is None else round(raised - landed, 3),
            "hook": None,
        }
        self.echo(
            f"ckptscan: ALARM: {v.get('fault_type')} confirmed at step {confirmed} (earliest anomalous "
            f"step {v.get('earliest_step')}, confidence {v.get('confidence')}); run {printable(str(self.run_dir))}"
        )
        self.write_status("alarm")
        if self.opts.on_alarm:
            self.alarm["hook"] = run_hook(
                self.opts.on_alarm, self.hook_env(result), self.opts.hook_timeout, self.echo
            )
            self.write_status("alarm")

    def hook_env(self, result) -> dict[str, str]:
        v = result.verdict
        values = {
            "FAULT_TYPE": v.get("fault_type"),
            "EARLIEST_STEP": v.get("earliest_step"),
            "CONFIRMED_STEP": v.get("confirmed_step"),
            "CONFIDENCE": v.get("confidence"),
            "RUN": str(self.run_dir.absolute()),
            "OUT": str(self.out_dir.absolute()),
            "SUMMARY": str(self.out_dir.absolute() / "summary.json"),
            "STATUS": str(self.status_file.absolute()),
        }
        return {f"CKPTSCAN_{k}": "" if val is None else str(val) for k, val in values.items()}

    def write_status(self, state: str, stop_reason: str | None = None) -> None:
        scan, result = self.scan_, self.result
        verdict = None
        if result is not None:
            v = result.verdict
            verdict = {
                "state": result.state,
                "headline": (result.summary.get("outcome") or {}).get("headline"),
                **{
                    k: v.get(k)
                    for k in ("anomalous", "fault_type", "earliest_step", "confirmed_step", "confidence")
                },
                "divergence_step": (result.summary.get("loss") or {}).get("divergence_step"),
            }
        steps = [e.step for e in (scan.entries if scan else []) if e.step is not None]
        status = {
            "schema": STATUS_SCHEMA,
            "state": state,
            "stop_reason": stop_reason,
            "run": str(self.run_dir),
            "out": str(self.out_dir),
            "summary": str(self.out_dir / "summary.json") if result is not None else None,
            "started_at": now_iso(self.started),
            "updated_at": now_iso(),
            "last_step_seen": max(steps, default=None),
            "last_step_analysed": scan.frontier if scan and self.analysed_key is not None else None,
            "checkpoints_analysed": (
                len((result.summary.get("checkpoints") or {}).get("steps") or []) if result is not None else 0
            ),
            "rounds": self.rounds,
            "pending": [
                {
                    "path": str(e.path),
                    "step": e.step,
                    "reason": e.reason or "still being written",
                    "unchanged_s": round(self.clock() - e.changed_at, 1),
                }
                for e in (scan.pending if scan else [])
            ]
            + [
                {"path": p, "step": None, "reason": "temporary name", "unchanged_s": None}
                for p in (scan.temporary if scan else [])
            ],
            "given_up": [
                {"path": str(e.path), "step": e.step, "reason": e.reason}
                for e in (scan.entries if scan else [])
                if e.abandoned
            ],
            "verdict": verdict,
            "alarm": self.alarm,
        }
        atomic_write(self.status_file, json.dumps(status, indent=2) + "\n")


def _confirmed(result) -> bool:
    v = result.verdict
    return bool(v.get("anomalous")) and v.get("confirmed_step") is not None


def run_hook(command: str, env: dict[str, str], timeout: float, echo: Callable[[str], None]) -> dict:
    """Run ``--on-alarm`` once: ``command`` split as a shell would split words (``shlex``), run
    without a shell, with the verdict in ``env`` on top of this process' environment.  Its output
    is repeated on stderr, each line prefixed; a failing hook is reported, never fatal."""
    record: dict = {"command": command, "exit_code": None, "error": None}
    try:
        argv = shlex.split(command)
    except ValueError as e:
        record["error"] = f"cannot split the command: {e}"
    else:
        if not argv:
            record["error"] = "empty command"
        else:
            try:
                p = subprocess.run(
                    argv,
                    env={**os.environ, **env},
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=timeout,
                    check=False,
                )
            except subprocess.TimeoutExpired as e:
                record["error"] = f"did not finish within {timeout:g}s (killed)"
                _echo_output(e.stdout, e.stderr, echo)
            except OSError as e:
                record["error"] = f"cannot run: {e.strerror or e}"
            else:
                record["exit_code"] = p.returncode
                _echo_output(p.stdout, p.stderr, echo)
                if p.returncode != 0:
                    record["error"] = f"exited with {p.returncode}"
    if record["error"]:
        echo(f"ckptscan: warning: --on-alarm {printable(command)}: {record['error']}")
    return record


def _echo_output(stdout: bytes | None, stderr: bytes | None, echo) -> None:
    lines = []
    for data in (stdout, stderr):
        if data:
            lines += data.decode(errors="replace").splitlines()
    for line in lines[-HOOK_OUTPUT_LINES:]:
        echo(f"ckptscan: on-alarm: {printable(line)}")


def exit_code(outcome: Outcome, fail_on: str) -> int:
    """``--exit-on-alarm``: 1 at the alarm.  Otherwise what ``analyze --fail-on`` gives for the last
    verdict; 5 (0 with ``--fail-on never``) when no checkpoint was analysed."""
    if outcome.reason == "alarm":
        return EXIT_ANOMALY
    if outcome.result is None:
        return EXIT_HEALTHY if fail_on == "never" else EXIT_INCONCLUSIVE
    return outcome.result.exit_code(fail_on)
