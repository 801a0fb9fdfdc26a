"""Child processes that do not outlive the command that started them."""

from __future__ import annotations

import contextlib
import ctypes
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In the child (preexec_fn): get SIGTERM when the parent dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
