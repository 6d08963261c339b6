"""Replay files are read whole once in a worker process, with a time limit, before ckptscan reads them.

HDF5 is a C library parsing a complex format: one changed byte in a replay file can make it loop
forever, a declared dataset shape can ask for terabytes, and a dataset can keep its bytes in
"external" files named by the file (resolved against the working directory) or in a FIFO that never
delivers.  None of that may hang or kill an analysis.  So before the activation side opens a replay
file, ``ReplayChecker.check`` sends it to a worker process (``python -m ckptscan.replay.check``, which
imports only h5py and numpy) that opens it, reads every attribute, refuses datasets that declare more
bytes than they store (or than the memory budget) and virtual datasets, then reads every dataset
through, a bounded slice at a time.  A worker that does not answer within the time limit is killed
and the file is refused (``ReplayError``); the worker is restarted for the next file.  The worker
also reports the external files a dataset reads, so the summary can note inputs outside the run.

The time limit is ``CKPTSCAN_REPLAY_TIMEOUT`` seconds (default ``DEFAULT_TIMEOUT``), per file, counted
from the moment the worker said it is ready: the worker's own start (an interpreter and h5py, slow
on a busy machine) has ``START_TIMEOUT`` apart.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

DEFAULT_TIMEOUT = 60.0
TIMEOUT_ENV = "CKPTSCAN_REPLAY_TIMEOUT"
# the worker's own start (an interpreter, h5py) is not a file's read: it has this long, apart
START_TIMEOUT = 300.0
SLICE_BYTES = 64 * 2**20  # the worker reads datasets through in slices of about this size


# ------------------------------------------------------------------------------------ worker side


def check_file(path: str, budget: int) -> dict:
    """Read one replay file through (see the module docstring); ``{"external": [...]}`` or
    ``{"error": one line}``."""
    import h5py

    external: list[str] = []
    try:
        with h5py.File(path, "r") as f:
            problems: list[str] = []
            _attrs(f)
            f.visititems_links(lambda name, link: _link(name, link, problems))
            f.visititems(lambda name, obj: _visit(name, obj, budget, external, problems))
            if problems:
                return {"error": problems[0]}
    except Exception as err:  # noqa: BLE001 -- the worker answers with what went wrong, whatever it is
        return {"error": f"not a readable HDF5 replay file ({_first_line(err)})"}
    return {"external": external}


def _link(name: str, link, problems: list[str]) -> None:
    import h5py

    if isinstance(link, h5py.ExternalLink) and not problems:
        problems.append(f"{name!r} is an external link to {link.filename!r}: not supported")


def _visit(name: str, obj, budget: int, external: list[str], problems: list[str]) -> None:
    import h5py

    if problems:
        return
    _attrs(obj)
    if not isinstance(obj, h5py.Dataset):
        return
    if obj.is_virtual:
        problems.append(f"dataset {name!r} is virtual (it reads other files): not supported")
        return
    declared = obj.size * obj.dtype.itemsize
    stored = obj.id.get_storage_size()
    for ext_name, _offset, _size in obj.external or ():
        external.append(os.fsdecode(ext_name))
    if declared > budget:
        problems.append(
            f"dataset {name!r} declares {declared} bytes (shape {list(obj.shape)}), more than "
            f"the memory budget of {budget} bytes"
        )
    elif not obj.id.get_create_plist().get_nfilters() and not obj.external and declared > stored:
        problems.append(
            f"dataset {name!r} declares {declared} bytes (shape {list(obj.shape)}) but stores "
            f"{stored}: unwritten or crafted"
        )
    else:
        _read_through(obj)


def _read_through(ds) -> None:
    """Every element once, a bounded slice along the first axis at a time (decompressing each chunk)."""
    if ds.ndim == 0 or ds.size == 0:
        ds[()]
        return
    row = max(1, ds.size // ds.shape[0] * ds.dtype.itemsize)
    step = max(1, SLICE_BYTES // row)
    for start in range(0, ds.shape[0], step):
        ds[start : start + step]


def _attrs(obj) -> None:
    for key in obj.attrs:
        obj.attrs[key]


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:200]}" if lines else type(err).__name__


def _serve() -> None:
    """The worker's loop: one JSON request per line on stdin, one JSON answer per line on stdout.  Its
    address space is capped at what it uses plus the memory budget, so a declaration the checks above
    do not cover (an attribute of a huge shape) fails here, not on the machine."""
    import h5py  # noqa: F401 -- imported before the worker says it is ready: its start is not timed

    print(json.dumps({"ready": True}), flush=True)
    capped = False
    for line in sys.stdin:
        req = json.loads(line)
        if not capped:
            _cap_memory(req["budget"])
            capped = True
        print(json.dumps(check_file(req["path"], req["budget"])), flush=True)


def _cap_memory(budget: int) -> None:
    try:
        import resource

        with open("/proc/self/status") as f:
            used = int(next(line for line in f if line.startswith("VmSize:")).split()[1]) * 1024
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = used + budget if hard == resource.RLIM_INFINITY else min(used + budget, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, ValueError, StopIteration):  # not Linux: no cap, the other checks stand
        pass


# ------------------------------------------------------------------------------------ caller side


def timeout_s() -> float:
    from ckptscan.errors import UsageError

    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise UsageError(f"{TIMEOUT_ENV}={text!r}: expected a positive number of seconds")
    return value


class ReplayChecker:
    """One worker process, started on first use and restarted after a timeout or an exit (not after
    a start that timed out: ``_start``); ``close()`` ends it.  The time limit covers a file's read,
    not the worker's start."""

    def __init__(self, timeout: float | None = None, start_timeout: float = START_TIMEOUT):
        self.timeout = timeout_s() if timeout is None else timeout
        self.start_timeout = start_timeout
        self._start_failed = ""  # why the worker could not start (then no file is sent to one)
        self.command = [sys.executable, "-m", "ckptscan.replay.check"]
        self._proc: subprocess.Popen | None = None
        self._answers: queue.Queue = queue.Queue()

    def check(self, path: Path, budget: int) -> list[Path]:
        """The external files the replay file reads (resolved as HDF5 does: relative to the working
        directory); ``ReplayError`` when it must not be read, or did not answer in time."""
        from ckptscan.errors import ReplayError

        proc = self._start(path)
        assert proc.stdin is not None  # _start opens the worker with stdin=PIPE
        try:
            proc.stdin.write(json.dumps({"path": str(path), "budget": budget}) + "\n")
            proc.stdin.flush()
            answer = self._read(
                time.monotonic() + self.timeout,
                lambda a: isinstance(a.get("error"), str) or isinstance(a.get("external"), list),
            )
        except queue.Empty:
            self.close()
            raise ReplayError(
                f"reading it did not finish within {self.timeout:g} s (a damaged HDF5 file can "
                f"make the library loop; the limit is {TIMEOUT_ENV})",
                path,
            ) from None
        except OSError as err:  # the worker died (killed from outside, out of memory)
            self.close()
            raise ReplayError(f"the worker reading it failed ({err.strerror or err})", path) from None
        if answer is None:
            code = self._exit_status()
            self.close()
            raise ReplayError(f"the worker reading it ended (exit status {code}) before answering", path)
        if "error" in answer:
            raise ReplayError(answer["error"], path)
        return [Path(p) if os.path.isabs(p) else Path.cwd() / p for p in answer["external"]]

    def _read(self, deadline: float, wanted: Callable[[dict], bool]) -> dict | None:
        """The worker's next line that is a JSON object ``wanted`` accepts; any other line is
        skipped (something in the interpreter's start-up, a ``sitecustomize``, may print: it is not
        an answer, and taking it for one would pair every later answer with the wrong file).
        None: the worker's output ended; ``queue.Empty`` at ``deadline`` (``time.monotonic()``)."""
        while True:
            line = self._answers.get(timeout=max(0.0, deadline - time.monotonic()))
            if line is None:
                return None
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and wanted(obj):
                return obj

    def _exit_status(self) -> int | None:
        """The worker's exit status once its output ended (it may not have been reaped yet)."""
        assert self._proc is not None
        try:
            return self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None

    def _start(self, path: Path) -> subprocess.Popen:
        """The worker, started and ready (its interpreter and h5py loaded): the time limit of a file
        counts from here, so a machine too busy to start a process quickly does not refuse good
        files.  A worker that did not get ready within ``start_timeout`` s refuses this file, and
        this checker refuses every later one at once, without a new wait (``ReplayError``, naming
        the worker, not the file); one that ended before it was ready refuses this file, and the
        next file starts a new one."""
        from ckptscan.errors import ReplayError

        if self._start_failed:
            raise ReplayError(self._start_failed, path)
        if self._proc is None:
            env = dict(os.environ)
            here = str(Path(__file__).resolve().parents[2])  # ckptscan importable as it is here
            env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
            self._proc = subprocess.Popen(
                self.command,
                env=env,
                text=True,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            self._answers = queue.Queue()
            threading.Thread(target=_pump, args=(self._proc.stdout, self._answers), daemon=True).start()
            worker = "the worker process that reads replay files"
            try:
                ready = self._read(time.monotonic() + self.start_timeout, lambda a: a.get("ready") is True)
            except queue.Empty:
                self.close()
                self._start_failed = (
                    f"{worker} did not start within {self.start_timeout:g} s (the file was not read)"
                )
                raise ReplayError(self._start_failed, path) from None
            if ready is None:
                code = self._exit_status()
                self.close()
                raise ReplayError(
                    f"{worker} ended (exit status {code}) before it was ready (the file was not read)", path
                )
        return self._proc

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            for stream in (self._proc.stdin, self._proc.stdout):
                with contextlib.suppress(OSError):  # a pipe to a killed worker may refuse a flush
                    if stream is not None:  # both are pipes (_start)
                        stream.close()
            self._proc = None


def _pump(stream, answers: queue.Queue) -> None:
    """Forward the worker's answer lines; None at its end."""
    try:
        for line in stream:
            answers.put(line)
    except (OSError, ValueError):  # the stream was closed under us
        pass
    answers.put(None)


if __name__ == "__main__":
    _serve()
