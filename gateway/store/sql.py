"""The store over a DB-API connection that one thread of its own owns: SQLite (the stdlib's
`sqlite3`) or PostgreSQL (psycopg 3). The event loop never runs a query: each call is handed to
that thread and awaited with a deadline.

Why a thread and not an asyncio driver: the store is off the token path (keys are cached, the
ledger is written in batches), so a query's latency costs nothing there; one thread and the
stdlib's driver serve SQLite with no dependency, and psycopg's blocking connection serves
PostgreSQL through the same code, statement for statement.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

import msgspec

from gateway.config.store import sqlite_path
from gateway.store.records import KeyRecord, LedgerRow, Reset, Snapshot, TeamRecord
from gateway.store.schema import MIGRATIONS, VERSION_TABLE

T = TypeVar("T")

CALL_TIMEOUT_S: Final = 30.0  # the longest wait for one call (a batch of the ledger included)

_KEY_FIELDS: Final = tuple(KeyRecord.__struct_fields__)
_TEAM_FIELDS: Final = tuple(TeamRecord.__struct_fields__)
_ROW_FIELDS: Final = tuple(LedgerRow.__struct_fields__)
_VERSION: Final = "SELECT value FROM meta WHERE name = 'keys_version'"
_TEAM_SPEND: Final = "UPDATE teams SET spend = spend + ? WHERE team_id = ?"
_JSON: Final = frozenset({"models", "metadata"})
_TABLES: Final = {"keys": ("token", _KEY_FIELDS), "teams": ("team_id", _TEAM_FIELDS)}


class Connection(Protocol):
    def cursor(self) -> Any: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def close(self) -> None: ...


class StoreError(Exception):
    """A call the store did not answer in time, or a conflict (a duplicate id)."""


class Conflict(StoreError):
    pass


def _encode(name: str, value: object) -> object:
    return json.dumps(value) if name in _JSON else value


def _decode(fields: Sequence[str], row: Sequence[object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, value in zip(fields, row, strict=True):
        out[name] = json.loads(str(value)) if name in _JSON else value
    return out


class SqlStore:
    """`connect` opens the connection (in the store's thread); `param`: its placeholder."""

    def __init__(self, connect: Callable[[], Connection], param: str, lock: str | None) -> None:
        self._connect = connect
        self._param = param
        self._lock = lock  # first in each migration's transaction (PostgreSQL's advisory lock)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="store")
        self._conn: Connection | None = None

    # -- plumbing ------------------------------------------------------------------------
    async def _run(self, fn: Callable[[Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self._pool, self._in_thread, fn)
        try:
            return await asyncio.wait_for(fut, CALL_TIMEOUT_S)
        except TimeoutError:
            raise StoreError(f"the store did not answer in {CALL_TIMEOUT_S:.0f} s") from None
        except StoreError:
            raise
        except Exception as e:  # the driver's own (a lost connection, a locked database)
            raise StoreError(f"{type(e).__name__}: {e}") from e

    def _in_thread(self, fn: Callable[[Connection], T]) -> T:
        if self._conn is None:
            self._conn = self._connect()
        conn = self._conn
        try:
            out = fn(conn)
            conn.commit()
            return out
        except BaseException:
            try:
                conn.rollback()
            except Exception:  # a connection that broke: the next call opens another
                self._conn = None
                with contextlib.suppress(Exception):
                    conn.close()
            raise

    def _sql(self, text: str) -> str:
        return text if self._param == "?" else text.replace("?", self._param)

    def _exec(self, conn: Connection, text: str, args: Sequence[object] = ()) -> Any:
        cur = conn.cursor()
        cur.execute(self._sql(text), tuple(args))
        return cur

    def _bump(self, conn: Connection) -> None:
        self._exec(conn, "UPDATE meta SET value = value + 1 WHERE name = 'keys_version'")

    async def close(self) -> None:
        def shut(conn: Connection) -> None:
            conn.close()

        if self._conn is not None:
            loop = asyncio.get_running_loop()
            with contextlib.suppress(TimeoutError):  # (a call still hung: its thread is left)
                await asyncio.wait_for(
                    loop.run_in_executor(self._pool, shut, self._conn), CALL_TIMEOUT_S
                )
            self._conn = None
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- schema --------------------------------------------------------------------------
    async def migrate(self) -> int:
        """Run the migrations this database has not had; returns its schema version."""

        def step(conn: Connection) -> int:
            if self._lock is not None:
                self._exec(conn, self._lock)
            self._exec(conn, VERSION_TABLE)
            row = self._exec(conn, "SELECT MAX(version) FROM schema_version").fetchone()
            have = int(row[0]) if row and row[0] is not None else 0
            for n, statements in enumerate(MIGRATIONS[have:], start=have + 1):
                for text in statements:
                    self._exec(conn, text)
                self._exec(conn, "INSERT INTO schema_version (version) VALUES (?)", (n,))
            return len(MIGRATIONS)

        return await self._run(step)

    # -- keys and teams ------------------------------------------------------------------
    async def version(self) -> int:
        def read(conn: Connection) -> int:
            return int(self._exec(conn, _VERSION).fetchone()[0])

        return await self._run(read)

    async def snapshot(self) -> Snapshot:
        def read(conn: Connection) -> Snapshot:
            v = int(self._exec(conn, _VERSION).fetchone()[0])
            keys = [
                msgspec.convert(_decode(_KEY_FIELDS, r), KeyRecord)
                for r in self._exec(conn, f"SELECT {', '.join(_KEY_FIELDS)} FROM keys").fetchall()
            ]
            teams = [
                msgspec.convert(_decode(_TEAM_FIELDS, r), TeamRecord)
                for r in self._exec(conn, f"SELECT {', '.join(_TEAM_FIELDS)} FROM teams").fetchall()
            ]
            return Snapshot(version=v, keys=keys, teams=teams)

        return await self._run(read)

    async def spends(self) -> list[tuple[str, str, float, float | None]]:
        """(table, id, spend, budget_reset_at) of every key and team with a budget: what the
        other instances spent, read between snapshots."""

        def read(conn: Connection) -> list[tuple[str, str, float, float | None]]:
            out = []
            for table, (pk, _) in _TABLES.items():
                text = (
                    f"SELECT {pk}, spend, budget_reset_at FROM {table} WHERE max_budget IS NOT NULL"
                )
                out += [(table, str(i), float(sp), at) for i, sp, at in self._exec(conn, text)]
            return out

        return await self._run(read)

    async def insert(self, table: str, record: KeyRecord | TeamRecord) -> None:
        """A new key or team; `Conflict` if its id is taken."""
        pk, fields = _TABLES[table]

        def put(conn: Connection) -> None:
            marks = ", ".join("?" for _ in fields)
            values = [_encode(f, getattr(record, f)) for f in fields]
            text = (
                f"INSERT INTO {table} ({', '.join(fields)}) VALUES ({marks}) ON CONFLICT DO NOTHING"
            )
            if not self._exec(conn, text, values).rowcount:  # (atomic: instances may race)
                raise Conflict(f"{pk} {getattr(record, pk)} exists")
            self._bump(conn)

        await self._run(put)

    async def update(self, table: str, id_: str, changes: dict[str, object]) -> bool:
        """Set `changes` on a key or team; False if there is none with that id."""
        pk, fields = _TABLES[table]
        names = [n for n in changes if n in fields and n != pk]

        def put(conn: Connection) -> bool:
            if not names:
                got = self._exec(conn, f"SELECT 1 FROM {table} WHERE {pk} = ?", (id_,))
                return got.fetchone() is not None
            sets = ", ".join(f"{n} = ?" for n in names)
            values = [_encode(n, changes[n]) for n in names]
            cur = self._exec(conn, f"UPDATE {table} SET {sets} WHERE {pk} = ?", (*values, id_))
            if cur.rowcount == 0:
                return False
            self._bump(conn)
            return True

        return await self._run(put)

    async def replace_key(self, old: str, new: KeyRecord, old_until: float | None) -> None:
        """Regenerate, in one transaction: `new` is added; `old` is deleted, or (with
        `old_until`) expires then (the rotation's overlap)."""
        fields = _KEY_FIELDS

        def put(conn: Connection) -> None:
            marks = ", ".join("?" for _ in fields)
            values = [_encode(f, getattr(new, f)) for f in fields]
            text = f"INSERT INTO keys ({', '.join(fields)}) VALUES ({marks}) ON CONFLICT DO NOTHING"
            if not self._exec(conn, text, values).rowcount:
                raise Conflict(f"token {new.token} exists")
            if old_until is None:
                self._exec(conn, "DELETE FROM keys WHERE token = ?", (old,))
            else:
                self._exec(conn, "UPDATE keys SET expires = ? WHERE token = ?", (old_until, old))
            self._bump(conn)

        await self._run(put)

    async def delete_keys(self, tokens: Iterable[str]) -> list[str]:
        """Revoke: returns those of `tokens` that existed."""
        wanted = list(tokens)

        def drop(conn: Connection) -> list[str]:
            drop = "DELETE FROM keys WHERE token = ?"
            gone = [t for t in wanted if self._exec(conn, drop, (t,)).rowcount]
            if gone:
                self._bump(conn)
            return gone

        return await self._run(drop)

    # -- the ledger ----------------------------------------------------------------------
    async def write(self, rows: Sequence[LedgerRow], resets: Sequence[Reset]) -> None:
        """One batch, in one transaction: the windows that rolled, then the rows, each key's
        and team's spend raised by its rows' (a row already written is skipped, with its spend)."""

        def put(conn: Connection) -> None:
            for r in resets:
                pk = _TABLES[r.table][0]
                args: tuple[object, ...]
                if r.old_reset_at is None:
                    where, args = f"{pk} = ? AND budget_reset_at IS NULL", (r.id,)
                else:
                    where, args = f"{pk} = ? AND budget_reset_at = ?", (r.id, r.old_reset_at)
                self._exec(
                    conn,
                    f"UPDATE {r.table} SET spend = 0, budget_reset_at = ? WHERE {where}",
                    (r.new_reset_at, *args),
                )
            keys: defaultdict[str, float] = defaultdict(float)
            teams: defaultdict[str, float] = defaultdict(float)
            marks = ", ".join("?" for _ in _ROW_FIELDS)
            insert = (
                f"INSERT INTO ledger ({', '.join(_ROW_FIELDS)}) VALUES ({marks}) "
                "ON CONFLICT (id) DO NOTHING"
            )
            for row in rows:
                cur = self._exec(conn, insert, [getattr(row, f) for f in _ROW_FIELDS])
                if cur.rowcount and row.spend:
                    if row.token is not None:
                        keys[row.token] += row.spend
                    teams[row.team_id] += row.spend
            for token, usd in sorted(keys.items()):  # (one order: no deadlock between batches)
                self._exec(conn, "UPDATE keys SET spend = spend + ? WHERE token = ?", (usd, token))
            for team, usd in sorted(teams.items()):
                self._exec(conn, _TEAM_SPEND, (usd, team))

        await self._run(put)

    async def spend_logs(
        self,
        start: float | None = None,
        end: float | None = None,
        token: str | None = None,
        team_id: str | None = None,
        request_id: str | None = None,
        limit: int = 10_000,
        newest_first: bool = False,
    ) -> list[LedgerRow]:
        where, args = [], []
        for clause, value in (
            ("end_time >= ?", start),
            ("end_time < ?", end),
            ("token = ?", token),
            ("team_id = ?", team_id),
            ("request_id = ?", request_id),
        ):
            if value is not None:
                where.append(clause)
                args.append(value)
        text = f"SELECT {', '.join(_ROW_FIELDS)} FROM ledger"
        if where:
            text += " WHERE " + " AND ".join(where)
        text += " ORDER BY end_time DESC, id DESC" if newest_first else " ORDER BY end_time, id"
        text += " LIMIT ?"
        args.append(limit)

        def read(conn: Connection) -> list[LedgerRow]:
            return [
                msgspec.convert(dict(zip(_ROW_FIELDS, r, strict=True)), LedgerRow)
                for r in self._exec(conn, text, args).fetchall()
            ]

        return await self._run(read)

    async def daily(self, start: float) -> dict[str, tuple[float, int]]:
        """Spend and requests per UTC day ("YYYY-MM-DD") of the rows that ended since `start`."""

        # The day number, floored on both back ends (SQLite's CAST truncates, PostgreSQL's rounds).
        day = "CAST(end_time / 86400 AS BIGINT)"
        day = f"({day} - CASE WHEN {day} > end_time / 86400 THEN 1 ELSE 0 END)"
        text = f"SELECT {day}, SUM(spend), COUNT(*) FROM ledger WHERE end_time >= ? GROUP BY 1"

        def read(conn: Connection) -> dict[str, tuple[float, int]]:
            return {
                datetime.fromtimestamp(int(d) * 86400, UTC).strftime("%Y-%m-%d"): (float(u), int(n))
                for d, u, n in self._exec(conn, text, (start,))
            }

        return await self._run(read)


def _sqlite(path: str) -> Callable[[], Connection]:
    def connect() -> Connection:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, check_same_thread=False, timeout=CALL_TIMEOUT_S)
        for _ in range(int(CALL_TIMEOUT_S * 100)):  # (instances opening a new file together)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError:
                time.sleep(0.01)
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    return connect


def _postgres(url: str) -> Callable[[], Connection]:
    def connect() -> Connection:
        import psycopg  # only a PostgreSQL store needs it

        conn: Connection = psycopg.connect(
            url,
            connect_timeout=int(CALL_TIMEOUT_S),
            # No statement outlives a call's deadline; a peer that vanished is noticed.
            options=f"-c statement_timeout={int(CALL_TIMEOUT_S * 1000)}",
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
        )
        return conn

    return connect


def open_store(url: str) -> SqlStore:
    """The store at `url` (sqlite:///PATH or postgresql://...), not yet connected."""
    if url.startswith("sqlite:///"):
        # (an immediate transaction: instances that start together migrate one after another)
        return SqlStore(_sqlite(sqlite_path(url)), "?", "BEGIN IMMEDIATE")
    return SqlStore(_postgres(url), "%s", "SELECT pg_advisory_xact_lock(7142014)")
