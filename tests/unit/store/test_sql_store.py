"""The store on a real SQLite file: migrations, keys, the ledger's batches and resets."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from gateway.store.records import KeyRecord, LedgerRow, Reset, TeamRecord
from gateway.store.schema import MIGRATIONS
from gateway.store.sql import Conflict, SqlStore, open_store
from tests.postgres_server import PostgresServer


def row(id_: str, token: str | None = "k1", spend: float = 1.0, end: float = 10.0) -> LedgerRow:
    return LedgerRow(
        id=id_,
        request_id="r" + id_,
        token=token,
        team_id="team",
        model="m",
        prompt_tokens=3,
        completion_tokens=4,
        cached_tokens=0,
        spend=spend,
        status="ok",
        start_time=end - 1,
        end_time=end,
    )


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SqlStore]:
    """The same calls on both back ends."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/deep/store.db"
    else:
        url = request.getfixturevalue("postgres_server").database()
    s = open_store(url)
    await s.migrate()
    yield s
    await s.close()


async def test_migrations_run_once_and_a_second_start_finds_them_done(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    for _ in range(2):
        s = open_store(url)
        assert await s.migrate() == len(MIGRATIONS)
        await s.close()
    versions = sqlite3.connect(tmp_path / "s.db").execute("SELECT version FROM schema_version")
    assert [v for (v,) in versions] == list(range(1, len(MIGRATIONS) + 1))


async def test_instances_starting_together_on_postgresql_migrate_once(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.database()
    stores = [open_store(url) for _ in range(4)]
    assert await asyncio.gather(*(s.migrate() for s in stores)) == [len(MIGRATIONS)] * 4
    for s in stores:
        await s.close()
    with psycopg.connect(url) as conn:
        versions = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
    assert [v for (v,) in versions] == list(range(1, len(MIGRATIONS) + 1))


async def test_every_change_of_keys_and_teams_moves_the_version(store: SqlStore) -> None:
    v0 = await store.version()
    await store.insert("teams", TeamRecord(team_id="team", models=["m"], metadata={"a": 1}))
    await store.insert("keys", KeyRecord(token="k1", key_name="sk-...1", team_id="team"))
    with pytest.raises(Conflict):
        await store.insert("keys", KeyRecord(token="k1", key_name="sk-...1"))
    assert await store.update("keys", "k1", {"max_budget": 5.0, "models": ["m"]})
    assert not await store.update("keys", "nope", {"max_budget": 5.0})
    snap = await store.snapshot()
    assert snap.version == v0 + 3
    assert snap.keys[0].max_budget == 5.0 and snap.keys[0].models == ["m"]
    assert snap.teams[0].metadata == {"a": 1}
    await store.replace_key("k1", KeyRecord(token="k2", key_name="sk-...2"), old_until=99.0)
    snap = await store.snapshot()
    assert {k.token: k.expires for k in snap.keys} == {"k1": 99.0, "k2": None}
    assert await store.delete_keys(["k1", "k3"]) == ["k1"]
    assert await store.version() == v0 + 5


async def test_a_row_is_written_once_and_counted_once(store: SqlStore) -> None:
    await store.insert("teams", TeamRecord(team_id="team"))
    await store.insert("keys", KeyRecord(token="k1", key_name="x"))
    await store.write([row("1"), row("2", spend=0.5)], [])
    await store.write([row("1")], [])  # a batch written again: nothing twice
    snap = await store.snapshot()
    assert snap.keys[0].spend == 1.5 and snap.teams[0].spend == 1.5
    assert [r.id for r in await store.spend_logs()] == ["1", "2"]


async def test_a_reset_applies_once_whichever_instance_sends_it(store: SqlStore) -> None:
    await store.insert("keys", KeyRecord(token="k1", key_name="x", budget_reset_at=100.0))
    await store.write([row("1", spend=3.0)], [])
    reset = Reset(table="keys", id="k1", old_reset_at=100.0, new_reset_at=200.0)
    await store.write([row("2", spend=1.0)], [reset])
    await store.write([], [reset])  # another instance's word on the same window
    k = (await store.snapshot()).keys[0]
    assert (k.spend, k.budget_reset_at) == (1.0, 200.0)


async def test_the_ledger_reads_by_period_key_team_and_request(store: SqlStore) -> None:
    await store.write([row("1", end=10), row("2", token=None, end=20), row("3", end=30)], [])
    assert [r.id for r in await store.spend_logs(start=15)] == ["2", "3"]
    assert [r.id for r in await store.spend_logs(end=20)] == ["1"]
    assert [r.id for r in await store.spend_logs(token="k1")] == ["1", "3"]
    assert [r.id for r in await store.spend_logs(request_id="r2")] == ["2"]
    assert [r.id for r in await store.spend_logs(team_id="other")] == []
    assert len(await store.spend_logs(limit=2)) == 2


async def test_instances_starting_together_on_sqlite_migrate_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    stores = [open_store(url) for _ in range(4)]
    assert await asyncio.gather(*(s.migrate() for s in stores)) == [len(MIGRATIONS)] * 4
    for s in stores:
        await s.close()
