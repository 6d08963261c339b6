"""The few user-facing failures, each with its message and exit code.

Every error a user can cause (bad input, bad usage) is a ``CkptscanError`` subclass whose ``str()``
is one line naming the file and what is wrong.  The CLI prints that line (no traceback unless
``--debug``) and exits with ``exit_code``.
"""

from __future__ import annotations

import re
from pathlib import Path

# Exit codes (documented in docs/cli.md and README).
EXIT_HEALTHY = 0
EXIT_ANOMALY = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_INTERNAL = 4
EXIT_INCONCLUSIVE = 5  # no alarm, but too little of the run could be examined to call it healthy


class CkptscanError(Exception):
    """Base class: a one-line, user-facing message."""

    exit_code = EXIT_INPUT

    def __init__(self, message: str, path: str | Path | None = None):
        self.path = str(path) if path is not None else None
        self.message = printable(message)  # one line, whatever names from the evidence it quotes
        super().__init__(f"{printable(self.path)}: {self.message}" if self.path else self.message)


class UsageError(CkptscanError):
    """The command line or an option value is wrong."""

    exit_code = EXIT_USAGE


class OutputError(UsageError):
    """An output the user asked for cannot be written (read-only or full file system, no permission):
    the analysis stops, since every later write would fail too; the path is named."""


class InputError(CkptscanError):
    """Something in the run could not be read or understood (file named in ``path``)."""

    exit_code = EXIT_INPUT


class FormatError(InputError):
    """A checkpoint/tensor file is malformed (truncated, bad header, bad offsets...)."""


class UnsafePickleError(InputError):
    """A torch file needs arbitrary unpickling; refused unless --trust-pickle."""


class LayoutError(InputError):
    """Tensor names (and config) do not resolve to a known architecture, or shapes disagree."""


class ReplayError(InputError):
    """A replay activation file breaks the contract (docs/replay.md)."""


DESCRIBE_CHARS = 200  # the most of an exception's message ``describe`` keeps


def describe(err: BaseException) -> str:
    """An exception as one short line: ``TypeName: message``, a message longer than
    ``DESCRIBE_CHARS`` cut at the last word boundary before it and marked `` ...`` (a reason cut
    mid-word reads as a typo in a file name)."""
    text = " ".join(str(err).split())
    if len(text) > DESCRIBE_CHARS:
        cut = text[:DESCRIBE_CHARS]
        text = (cut.rsplit(" ", 1)[0] if " " in cut else cut) + " ..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def unexpected(err: BaseException) -> str:
    """The one-line reason for an exception no reader anticipated, raised while a file was read or
    analysed (a containment boundary turns it into a skipped entry instead of ending the run)."""
    return (
        f"could not be analysed ({describe(err)}); if the files are sound this is a ckptscan bug: "
        f"please report it with the --debug traceback"
    )


# control characters (C0, DEL, C1) and bidirectional overrides: they would move the cursor, colour or
# rewrite a terminal line, or start a forged line, when a file or tensor name is printed
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with control characters shown as escapes (``\\x1b``, ``\\n``): safe for one terminal or
    CI-annotation line, whatever names a checkpoint carries."""
    return _CONTROL.sub(_escape, text)


def printable_tree(obj: object) -> object:
    """A copy of JSON-like data with ``printable`` applied to every string, keys included."""
    if isinstance(obj, str):
        return printable(obj)
    if isinstance(obj, dict):
        return {printable_tree(k): printable_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [printable_tree(v) for v in obj]
    return obj


def _escape(m: re.Match) -> str:
    ch = m.group()
    return repr(ch)[1:-1] if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"
