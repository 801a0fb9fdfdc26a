"""Child processes the drill owns: start, signal, restart, and always stop them.

Children get SIGKILL when the drill dies (PR_SET_PDEATHSIG: SIGKILL also ends a stopped one), so
none outlives it even after `kill -9`. `stop` sends SIGCONT before SIGTERM (a stopped process
would not act on SIGTERM), waits a bounded time, then kills.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from gateway.procs import child_env

log = logging.getLogger(__name__)


class Child:
    """One command, started (and restarted) as a child process, its output to a log file."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped = False  # SIGSTOP sent and no SIGCONT since
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        if self.alive:
            raise RuntimeError(f"{self.name} is already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self._log is None:
            self._log = self.log_path.open("wb")  # a restart keeps writing to it
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=child_env(signal.SIGKILL),
            process_group=0,  # Ctrl-C reaches the drill only; it stops its children in order
        )
        self.stopped = False
        log.info("started %s (pid %d)", self.name, self.proc.pid)

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} is not running")
        self.proc.send_signal(sig)
        if sig is signal.SIGSTOP:
            self.stopped = True
        elif sig in (signal.SIGCONT, signal.SIGKILL):
            self.stopped = False

    def kill(self, timeout_s: float = 5.0) -> None:
        """SIGKILL, and reap it."""
        self.signal(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(timeout_s)

    def tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def stop_all(children: Sequence[Child], grace_s: float = 5.0) -> None:
    """SIGCONT + SIGTERM to every live child, wait up to `grace_s` for all, SIGKILL the rest.
    Synchronous on purpose: it runs in `finally` blocks, on Ctrl-C and after errors."""
    for c in children:
        p = c.proc
        if p is None or p.poll() is not None:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGCONT)
            p.send_signal(signal.SIGTERM)
        c.stopped = False
    deadline = time.monotonic() + grace_s
    for c in children:
        p = c.proc
        if p is None:
            continue
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(max(0.0, deadline - time.monotonic()))
        if p.poll() is None:
            log.warning("%s (pid %d) ignored SIGTERM; killing it", c.name, p.pid)
            p.kill()
            p.wait(5.0)
        c.close_log()
