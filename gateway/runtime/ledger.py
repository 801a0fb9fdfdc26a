"""The spend ledger's writer: rows are queued without waiting and written in batches, off the
loop, by one task.

Bounded: at most `max_rows` wait; beyond that a row is dropped and counted (`dropped`), never
waited for. A batch the store refuses stays queued and is written again after a pause, so a
store that comes back loses nothing that fitted. `close` writes what is left.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Final

from gateway.policy.budget import Budget
from gateway.store.records import LedgerRow, Reset
from gateway.store.sql import SqlStore

log = logging.getLogger(__name__)

BATCH: Final = 512  # rows per transaction at most
RETRY_S: Final = 1.0  # after a batch the store refused


class Ledger:
    def __init__(
        self,
        store: SqlStore,
        flush_s: float,
        max_rows: int,
        resets: Callable[[], list[Reset]],
    ) -> None:
        self._store = store
        self._flush_s = flush_s
        self._max = max_rows
        self._resets = resets  # the budget windows that rolled since the last batch
        self._held: list[Reset] = []  # those of a batch the store refused
        self._rows: deque[tuple[LedgerRow, tuple[Budget, ...]]] = deque()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.dropped = 0
        self.written = 0
        # Moves as each batch's spend leaves the budgets' `pending`: a read of the store's
        # spend that overlapped it may count that batch twice or not at all (keyring.py).
        self.epoch = 0
        self.writing = False

    @property
    def pending(self) -> int:
        return len(self._rows)

    def add(self, row: LedgerRow, budgets: tuple[Budget, ...] = ()) -> None:
        """Queue a row; `budgets` are told when its spend is in the store."""
        if len(self._rows) >= self._max:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.error("ledger: %d rows dropped (the store is behind)", self.dropped)
            return
        self._rows.append((row, budgets))
        self._idle.clear()
        if len(self._rows) >= BATCH:
            self._wake.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="ledger")

    async def flushed(self, timeout_s: float = 5.0) -> bool:
        """Wait until every row queued so far is written (the admin API reads after it), at
        most `timeout_s`; False when rows still wait (the store is behind or down)."""
        self._wake.set()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            if not self._rows and not self._closing:
                self._idle.set()
            try:
                await asyncio.wait_for(self._wake.wait(), self._flush_s)
            except TimeoutError:
                pass
            self._wake.clear()
            closing = self._closing
            ok = await self._write()
            if closing and (ok or not self._rows):
                return
            if not ok:
                if closing:
                    log.error("ledger: %d rows not written at close", len(self._rows))
                    return
                await asyncio.sleep(RETRY_S)

    async def _write(self) -> bool:
        """Write queued rows in batches; False when the store refused one (it stays queued)."""
        while True:
            resets, self._held = self._held + self._resets(), []
            n = min(len(self._rows), BATCH)
            if n == 0 and not resets:
                return True
            batch = [self._rows[i] for i in range(n)]
            self.writing = True
            try:
                await self._store.write([r for r, _ in batch], resets)
            except Exception:
                log.exception("ledger: a batch of %d rows was not written", n)
                self._held = resets
                return False
            finally:
                self.writing = False
                self.epoch += 1  # (a batch that timed out may yet be committed)
            for _ in range(n):
                row, budgets = self._rows.popleft()
                for b in budgets:
                    b.written(row.spend)
            self.written += n
            if n < BATCH:
                return True
