"""The store's keys and teams as this instance holds them, and what their requests spend.

Requests never wait on the store: `lookup` reads a dict. The cache is read afresh when this
instance changes a key (at once) and when the store's version moves (polled every `poll_s`:
another instance's revocation applies here within that bound). Between changes, each poll
reads the budgets' spend: what other instances spent counts here within `poll_s` too. What a
reload of the store leaves alone: the buckets' levels, the reserves of requests in flight, and
the spend settled here that the ledger has not written yet.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable

from gateway import tasks
from gateway.config.pricing import Pricing
from gateway.config.store import StoreConfig
from gateway.policy.budget import Budget, parse_duration
from gateway.policy.grants import Allowance, Charge, Grant, buckets, settle
from gateway.runtime.ledger import Ledger
from gateway.store.records import KeyRecord, LedgerRow, Reset, Snapshot, TeamRecord
from gateway.store.sql import SqlStore

log = logging.getLogger(__name__)

Shape = tuple[object, ...]


def _shape(r: KeyRecord | TeamRecord) -> Shape:
    return (r.max_budget, r.budget_duration, r.rpm_limit, r.tpm_limit, tuple(r.models))


def _allowance(
    name: str,
    r: KeyRecord | TeamRecord,
    old: tuple[Shape, Allowance] | None,
    mono: float,
    spends: bool = True,
) -> Allowance:
    """The allowance of a key or team as the store has it now: the one it had, changed in
    place (requests in flight settle on it), or a new one."""
    window = None if r.budget_duration is None else parse_duration(r.budget_duration)
    if old is None:
        requests, tokens = buckets(r.rpm_limit, r.tpm_limit, mono)
        budget = Budget(r.max_budget, window, r.budget_reset_at, r.spend)
        return Allowance(name, budget, frozenset(r.models), requests, tokens)
    shape, a = old
    if shape != _shape(r):
        a.models = frozenset(r.models)
        a.budget.limit = r.max_budget
        if window != a.budget.window:
            a.budget.window, a.budget.reset_at = window, r.budget_reset_at
        requests, tokens = buckets(r.rpm_limit, r.tpm_limit, mono)
        if r.rpm_limit != shape[2]:
            a.requests = requests
        if r.tpm_limit != shape[3]:
            a.tokens = tokens
    if spends:
        a.budget.stored(r.spend, r.budget_reset_at)
    return a


class Keyring:
    def __init__(
        self,
        store: SqlStore,
        config: StoreConfig,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._poll_s = config.poll_s
        self._wall, self._mono = wall, mono
        self.version = -1
        self.keys: dict[str, KeyRecord] = {}
        self.teams: dict[str, TeamRecord] = {}
        self._grants: dict[bytes, Grant] = {}
        self._team_grants: dict[str, Grant] = {}
        self._allow: dict[tuple[str, str], tuple[Shape, Allowance]] = {}
        self.ledger = Ledger(store, config.flush_s, config.max_pending_rows, self._resets)
        self._task: asyncio.Task[None] | None = None
        self.on_change: Callable[[], None] | None = None  # after the cache was read afresh

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        await self.store.migrate()
        await self.refresh()
        self.ledger.start()
        self._task = asyncio.get_running_loop().create_task(self._poll(), name="keyring")

    async def close(self) -> None:
        await tasks.stop(self._task)  # (the caller's own cancellation goes on)
        self._task = None
        await self.ledger.close()
        await self.store.close()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            try:
                if await self.store.version() != self.version:
                    await self.refresh()
                else:
                    await self._read_spends()
            except Exception:
                log.exception("keyring: the store could not be read (the cache stays)")

    async def refresh(self) -> None:
        ledger = self.ledger
        epoch, writing = ledger.epoch, ledger.writing
        snap = await self.store.snapshot()
        self._apply(snap, spends=not writing and ledger.epoch == epoch)

    async def _read_spends(self) -> None:
        """The budgets' spend as the store has it, unless a batch was written meanwhile."""
        ledger = self.ledger
        epoch, writing = ledger.epoch, ledger.writing
        spends = await self.store.spends()
        if not writing and ledger.epoch == epoch:
            self._spent(spends)

    def _apply(self, snap: Snapshot, spends: bool = True) -> None:
        """`spends`: whether the snapshot's spend figures can be taken (no batch of the ledger
        was written while it was read)."""
        mono = self._mono()
        allow: dict[tuple[str, str], tuple[Shape, Allowance]] = {}
        team_grants: dict[str, Grant] = {}
        for t in snap.teams:
            k = ("teams", t.team_id)
            a = _allowance(f"team {t.team_id}", t, self._allow.get(k), mono, spends)
            allow[k] = (_shape(t), a)
            team_grants[t.team_id] = Grant("", t.team_id, a)
        grants: dict[bytes, Grant] = {}
        for r in snap.keys:
            k = ("keys", r.token)
            a = _allowance(f"key {r.key_alias or r.key_name}", r, self._allow.get(k), mono, spends)
            allow[k] = (_shape(r), a)
            team = team_grants.get(r.team_id or "")
            tenant = r.team_id or "anonymous"
            g = Grant(
                r.token, tenant, a, None if team is None else team.own, r.expires, r.key_alias
            )
            grants[bytes.fromhex(r.token)] = g
        self.keys = {r.token: r for r in snap.keys}
        self.teams = {t.team_id: t for t in snap.teams}
        self._allow, self._grants, self._team_grants = allow, grants, team_grants
        self.version = snap.version
        if self.on_change is not None:
            self.on_change()

    def _spent(self, spends: list[tuple[str, str, float, float | None]]) -> None:
        """The budgets' spend as the store has it now (the other instances' included)."""
        for table, id_, spent, reset_at in spends:
            found = self._allow.get((table, id_))
            if found is not None:
                found[1].budget.stored(spent, reset_at)

    def _resets(self) -> list[Reset]:
        out = []
        for (table, id_), (_, a) in self._allow.items():
            b = a.budget
            if b.rolled is not None:
                out.append(
                    Reset(table=table, id=id_, old_reset_at=b.rolled[0], new_reset_at=b.rolled[1])
                )
                b.rolled = None
        return out

    # -- the request path ------------------------------------------------------------------
    def lookup(self, digest: bytes) -> Grant | None:
        """The store's key with SHA-256 `digest` (None: not a store key)."""
        return self._grants.get(digest)

    def team(self, tenant: str) -> Grant | None:
        """The store's budget and limits for `tenant` (a team of that name), for requests
        whose key is in the config file."""
        return self._team_grants.get(tenant)

    def tenants(self) -> Iterable[str]:
        return self.teams.keys()

    def record(
        self,
        charge: Charge | None,
        request_id: str,
        tenant: str,
        model: str,
        tokens: tuple[int, int, int],
        status: str,
        pricing: Pricing,
        started: float,
    ) -> None:
        """A request ended: its cost settled on its budgets, its ledger row queued."""
        prompt, completion, cached = tokens
        usd = pricing.cost_usd(model, prompt, completion, cached)
        wall = self._wall()
        budgets: tuple[Budget, ...] = ()
        token = None
        if charge is not None:
            settle(charge, prompt + completion, usd, wall, self._mono())
            budgets = tuple(a.budget for a in charge.allowances)
            token = charge.grant.token or None
        row = LedgerRow(
            id=uuid.uuid4().hex,
            request_id=request_id,
            token=token,
            team_id=tenant,
            model=model,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cached_tokens=cached,
            spend=usd,
            status=status,
            start_time=started,
            end_time=wall,
        )
        self.ledger.add(row, budgets)
