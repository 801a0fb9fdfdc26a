"""Child processes that do not outlive the command that started them."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
from collections.abc import Sequence

_PR_SET_PDEATHSIG = 1
ENV = "SHARDGATE_DIE_WITH_PARENT"  # "<parent pid>:<signal>", read by the child at its start


def child_env(sig: signal.Signals = signal.SIGTERM) -> dict[str, str]:
    """The environment of a child (one of our commands) that is to get `sig` when this process
    dies. The child asks for it itself (`die_with_parent`): code run between fork and exec
    (`preexec_fn`) is not safe in a process with threads, which gRPC's are."""
    return {**os.environ, ENV: f"{os.getpid()}:{int(sig)}"}


def die_with_parent() -> None:
    """First thing in one of our commands: if its parent asked (`child_env`), get the signal
    named when the parent dies, or now if it already has. Not passed on to its own children."""
    value = os.environ.pop(ENV, None)
    if not value:
        return
    try:
        parent, sig = (int(part) for part in value.split(":"))
    except ValueError:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
    if os.getppid() != parent:  # it died before the line above
        os.kill(os.getpid(), sig)


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
