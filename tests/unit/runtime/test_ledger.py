"""The ledger's writer: bounded, batched, and nothing lost when the store refuses a batch."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gateway.policy.budget import Budget
from gateway.runtime.ledger import Ledger
from gateway.store.records import KeyRecord, LedgerRow, Reset
from gateway.store.sql import SqlStore, open_store
from tests.unit.store.test_sql_store import row


class Flaky(SqlStore):
    """A real store that refuses its first `fails` batches."""

    def __init__(self, inner: SqlStore, fails: int) -> None:
        self.__dict__.update(inner.__dict__)
        self.fails = fails

    async def write(self, rows: Sequence[LedgerRow], resets: Sequence[Reset]) -> None:
        if self.fails:
            self.fails -= 1
            raise OSError("the store is down")
        await super().write(rows, resets)


async def store(tmp_path: Path) -> SqlStore:
    s = open_store(f"sqlite:///{tmp_path}/s.db")
    await s.migrate()
    return s


async def test_rows_beyond_the_bound_are_dropped_and_counted(tmp_path: Path) -> None:
    ledger = Ledger(await store(tmp_path), 60.0, 3, list)
    for i in range(5):
        ledger.add(row(str(i)))
    assert ledger.dropped == 2
    ledger.start()
    await ledger.close()
    assert ledger.written == 3


async def test_a_refused_batch_is_written_again_and_its_budget_told(tmp_path: Path) -> None:
    flaky = Flaky(await store(tmp_path), fails=1)
    resets = [Reset(table="keys", id="k1", old_reset_at=None, new_reset_at=5.0)]
    ledger = Ledger(flaky, 0.01, 100, lambda: [resets.pop()] if resets else [])
    budget = Budget(None, None, None)
    budget.settle(0.0, 1.0, 0.0)
    await flaky.insert("keys", KeyRecord(token="k1", key_name="x"))
    ledger.start()
    ledger.add(row("1"), (budget,))
    assert await ledger.flushed(timeout_s=10)
    assert flaky.fails == 0 and budget.pending == 0
    assert [r.id for r in await flaky.spend_logs()] == ["1"]
    k = (await flaky.snapshot()).keys[0]
    assert (k.spend, k.budget_reset_at) == (1.0, 5.0)  # the reset of the refused batch too
    await ledger.close()


async def test_close_writes_what_waits(tmp_path: Path) -> None:
    s = await store(tmp_path)
    ledger = Ledger(s, 60.0, 100, list)
    ledger.start()
    for i in range(3):
        ledger.add(row(str(i)))
    await ledger.close()
    assert len(await s.spend_logs()) == 3
