"""Child processes that do not outlive the command that started them."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import signal
import subprocess
from collections.abc import Sequence

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> None:
    """In the child (preexec_fn): get `sig` when the parent dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)


def exited(procs: Sequence[subprocess.Popen[bytes]]) -> list[int]:
    return [p.pid for p in procs if p.poll() is not None]


async def terminate(procs: Sequence[subprocess.Popen[bytes]], grace_s: float) -> None:
    """SIGTERM every live one, wait up to `grace_s` for all to exit, then SIGKILL the rest."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for _ in range(max(1, round(grace_s / 0.05))):
        if all(p.poll() is not None for p in procs):
            break
        await asyncio.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
