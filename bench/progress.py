"""A live progress line on stderr: requests done, rate, tokens/s, failures."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import TextIO

from bench.runner import Tally

WIDTH = 28


def render(tally: Tally, label: str, elapsed_s: float) -> str:
    frac = tally.done / tally.total if tally.total else 1.0
    filled = int(WIDTH * frac)
    bar = "#" * filled + "." * (WIDTH - filled)
    rate = tally.done / elapsed_s if elapsed_s > 0 else 0.0
    tps = tally.tokens / elapsed_s if elapsed_s > 0 else 0.0
    return (
        f"{label} [{bar}] {tally.done}/{tally.total} req  {rate:,.0f} req/s  "
        f"{tps:,.0f} tok/s  failed {tally.failed}  {elapsed_s:.1f}s"
    )


class Progress:
    """Redraws every `interval_s` until stopped; owns its task."""

    def __init__(self, tally: Tally, label: str, out: TextIO = sys.stderr) -> None:
        self._tally = tally
        self._label = label
        self._out = out
        self._task: asyncio.Task[None] | None = None
        self._t0 = time.monotonic()

    def start(self, interval_s: float = 0.25) -> None:
        self._t0 = time.monotonic()
        self._task = asyncio.create_task(self._loop(interval_s), name="bench-progress")

    async def _loop(self, interval_s: float) -> None:
        while True:
            self._draw()
            await asyncio.sleep(interval_s)

    def _draw(self) -> None:
        line = render(self._tally, self._label, time.monotonic() - self._t0)
        self._out.write("\r" + line + "\x1b[K")
        self._out.flush()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        self._draw()
        self._out.write("\n")
        self._out.flush()
