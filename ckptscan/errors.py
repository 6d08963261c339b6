"""The few user-facing failures, each with its message and exit code.

Every error a user can cause (bad input, bad usage) is a ``CkptscanError`` subclass whose ``str()``
is one line naming the file and what is wrong.  The CLI prints that line (no traceback unless
``--debug``) and exits with ``exit_code``.
"""

from __future__ import annotations

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
        self.message = message
        super().__init__(f"{self.path}: {message}" if self.path else message)


class UsageError(CkptscanError):
    """The command line or an option value is wrong."""

    exit_code = EXIT_USAGE


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
