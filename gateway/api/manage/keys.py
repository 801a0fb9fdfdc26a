"""/key/generate, /key/update, /key/delete, /key/regenerate, /key/info, /team/new,
/team/update, /team/info: LiteLLM's management endpoints, bodies and answers, over the store.

Keys are kept as their SHA-256 (LiteLLM's `token`); the key itself is in the answer of the call
that made it, and nowhere else. Every change is in the store before the answer, and in this
instance's cache too: a deleted key is refused here from the answer on, and on every other
instance within `store.poll_s`.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Container, Mapping
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import msgspec
from aiohttp import web

from gateway.api.manage.bodies import (
    EXPECTED,
    DeleteKeys,
    GenerateKey,
    KeyFields,
    LimitFields,
    NewTeam,
    RegenerateKey,
    UpdateKey,
    UpdateTeam,
)
from gateway.api.openai.validation import decode_json
from gateway.policy.budget import parse_duration
from gateway.runtime.keyring import Keyring
from gateway.store.records import KeyRecord, TeamRecord
from gateway.store.sql import Conflict, StoreError
from gateway.types import InvalidRequest, ModelNotFound, Unavailable

T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_HASH: Final = re.compile(r"^[0-9a-f]{64}$")
_UNKNOWN: Final = re.compile(r"unknown field `([^`]+)`")
_LIMITS: Final = ("max_budget", "budget_duration", "tpm_limit", "rpm_limit", "models")


def token_of(key: str, known: Container[str]) -> str:
    """A key's hash: `key` itself when it is the hash of a `known` key already (64 hex digits;
    a key of your own that looks like one is hashed like any other)."""
    if _HASH.match(key) and key in known:
        return key
    return hashlib.sha256(key.encode()).hexdigest()


def iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, UTC).isoformat()


def decode(body: bytes, type_: type[T]) -> T:
    try:
        return msgspec.json.decode(body, type=type_)
    except msgspec.ValidationError as e:
        m = _UNKNOWN.search(str(e))
        if m is not None:
            raise InvalidRequest(f"Unrecognized request argument supplied: {m[1]}", m[1]) from None
    except msgspec.DecodeError:
        pass
    return decode_json(msgspec.json.Decoder(type_), body, EXPECTED)  # (its error)


def _duration(name: str, text: str | None) -> None:
    if text is not None:
        try:
            parse_duration(text)
        except ValueError as e:
            raise InvalidRequest(f"Invalid value for '{name}': {e}.", name) from None


def _after(text: str | None, now: float) -> float | None:
    return None if text is None else parse_duration(text).after(now)


def _limits(b: LimitFields, now: float) -> dict[str, Any]:
    """The fields a new key's or team's record takes from the body."""
    return {
        "models": b.models or [],
        "max_budget": b.max_budget,
        "budget_duration": b.budget_duration,
        "budget_reset_at": _after(b.budget_duration, now),
        "tpm_limit": b.tpm_limit,
        "rpm_limit": b.rpm_limit,
        "metadata": b.metadata or {},
        "created_at": now,
    }


def _common_view(r: KeyRecord | TeamRecord) -> dict[str, Any]:
    return {
        "models": r.models,
        "spend": r.spend,
        "max_budget": r.max_budget,
        "budget_duration": r.budget_duration,
        "budget_reset_at": iso(r.budget_reset_at),
        "tpm_limit": r.tpm_limit,
        "rpm_limit": r.rpm_limit,
        "metadata": r.metadata,
        "created_at": iso(r.created_at),
    }


def key_view(r: KeyRecord) -> dict[str, Any]:
    """A key's row as LiteLLM answers it (never the key itself)."""
    return {
        "token": r.token,
        "key_name": r.key_name,
        "key_alias": r.key_alias,
        "team_id": r.team_id,
        "expires": iso(r.expires),
        **_common_view(r),
    }


def team_view(t: TeamRecord) -> dict[str, Any]:
    return {"team_id": t.team_id, "team_alias": t.team_alias, **_common_view(t)}


def _count(q: Mapping[str, str], name: str, default: int, top: int | None) -> int:
    """A whole-number query parameter of at least 1 (and at most `top`)."""
    text = q.get(name)
    if text is None:
        return default
    n = int(text) if text.isdigit() else 0
    if n < 1 or (top is not None and n > top):
        bound = f"1 to {top}" if top is not None else "at least 1"
        raise InvalidRequest(f"Invalid value for '{name}': {bound}.", name)
    return n


def guarded(guard: Callable[[web.Request], None], handler: Handler) -> Handler:
    """`handler` for callers with the master key; a store that fails it is a 503."""

    async def call(request: web.Request) -> web.StreamResponse:
        guard(request)
        try:
            return await handler(request)
        except StoreError as e:  # (the store down or slow: not the caller's fault)
            raise Unavailable(f"The store did not answer: {e}") from None

    return call


def _shown(key: str) -> str:
    return f"sk-...{key[-4:]}"


class KeyAdmin:
    """`guard` raises unless the caller holds the master key; `tenants`: the names of the config
    file's tenants in force (a team_id may name one; the store's teams the keyring knows)."""

    def __init__(
        self,
        keyring: Keyring,
        guard: Callable[[web.Request], None],
        tenants: Callable[[], Collection[str]],
        read: Callable[[web.Request], Awaitable[bytes]],
    ) -> None:
        self._ring = keyring
        self._guard = guard
        self._tenants = tenants
        self._read = read

    def routes(self, app: web.Application) -> None:
        r = app.router
        r.add_post("/key/generate", self._g(self.generate))
        r.add_post("/key/update", self._g(self.update))
        r.add_post("/key/delete", self._g(self.delete))
        r.add_post("/key/regenerate", self._g(self.regenerate))
        r.add_post("/key/{key}/regenerate", self._g(self.regenerate))
        r.add_get("/key/info", self._g(self.info))
        r.add_get("/key/list", self._g(self.list_keys))
        r.add_post("/team/new", self._g(self.new_team))
        r.add_post("/team/update", self._g(self.update_team))
        r.add_get("/team/info", self._g(self.team_info))
        r.add_get("/team/list", self._g(self.list_teams))

    def _g(self, handler: Handler) -> Handler:
        return guarded(self._guard, handler)

    async def _body(self, request: web.Request, type_: type[T]) -> T:
        return decode(await self._read(request), type_)

    def _team(self, team_id: str | None) -> None:
        known = team_id is None or team_id in self._ring.teams or team_id in self._tenants()
        if not known:
            msg = f"team_id {team_id} does not exist: make it with /team/new"
            raise InvalidRequest(msg, "team_id")

    def _check(self, b: KeyFields) -> None:
        _duration("duration", b.duration)
        _duration("budget_duration", b.budget_duration)
        self._team(b.team_id)

    # -- keys ------------------------------------------------------------------------------
    async def generate(self, request: web.Request) -> web.Response:
        b = await self._body(request, GenerateKey)
        self._check(b)
        key = b.key or "sk-" + secrets.token_urlsafe(24)
        now = time.time()
        r = KeyRecord(
            token=hashlib.sha256(key.encode()).hexdigest(),  # (as requests are looked up)
            key_name=_shown(key),
            key_alias=b.key_alias,
            team_id=b.team_id,
            expires=_after(b.duration, now),
            **_limits(b, now),
        )
        try:
            await self._ring.store.insert("keys", r)
        except Conflict:
            raise InvalidRequest("That key exists already.", "key") from None
        await self._ring.refresh()
        return web.json_response({"key": key, "token_id": r.token, **key_view(r)})

    def _record(self, key: str) -> KeyRecord:
        r = self._ring.keys.get(token_of(key, self._ring.keys))
        if r is None:
            raise ModelNotFound(f"Key not found: {key}", "key")
        return r

    async def update(self, request: web.Request) -> web.Response:
        b = await self._body(request, UpdateKey)
        self._check(b)
        await self._ring.refresh()  # (a key another instance made just now)
        r = self._record(b.key)
        given = {f: getattr(b, f) for f in KeyFields.__struct_fields__ if f in b.__struct_fields__}
        changes = {f: v for f, v in given.items() if v is not None and f != "duration"}
        now = time.time()
        if b.duration is not None:
            changes["expires"] = _after(b.duration, now)
        if b.budget_duration is not None and b.budget_duration != r.budget_duration:
            changes["budget_reset_at"] = _after(b.budget_duration, now)
        if not await self._ring.store.update("keys", r.token, changes):
            raise ModelNotFound(f"Key not found: {b.key}", "key")
        await self._ring.refresh()
        return web.json_response(key_view(self._record(r.token)))

    async def delete(self, request: web.Request) -> web.Response:
        b = await self._body(request, DeleteKeys)
        if not b.keys and not b.key_aliases:
            raise InvalidRequest("At least one of 'keys' or 'key_aliases' must be provided.")
        await self._ring.refresh()
        tokens = {token_of(k, self._ring.keys): k for k in b.keys or ()}
        aliases = set(b.key_aliases or ())
        for r in self._ring.keys.values():
            if r.key_alias is not None and r.key_alias in aliases:
                tokens[r.token] = r.key_alias
                aliases.discard(r.key_alias)
        missing = [k for t, k in tokens.items() if t not in self._ring.keys] + sorted(aliases)
        if missing:  # (nothing deleted: all or none)
            param = "keys" if b.keys else "key_aliases"
            raise ModelNotFound(f"Keys not found: {missing}", param)
        gone = await self._ring.store.delete_keys(tokens)
        await self._ring.refresh()
        return web.json_response({"deleted_keys": [tokens[t] for t in gone]})

    async def regenerate(self, request: web.Request) -> web.Response:
        raw = await self._read(request)
        b = decode(raw, RegenerateKey) if raw.strip() else RegenerateKey()
        key = request.match_info.get("key") or b.key
        if key is None:
            raise InvalidRequest("Missing required parameter: 'key'.", "key")
        _duration("grace_period", b.grace_period)
        await self._ring.refresh()
        old = self._record(key)
        new_key = b.new_key or "sk-" + secrets.token_urlsafe(24)
        token = hashlib.sha256(new_key.encode()).hexdigest()
        new = msgspec.structs.replace(old, token=token, key_name=_shown(new_key))
        now = time.time()
        until = _after(b.grace_period, now)
        if until is not None and old.expires is not None:
            until = min(until, old.expires)
        try:
            await self._ring.store.replace_key(old.token, new, until)
        except Conflict:
            raise InvalidRequest("That key exists already.", "new_key") from None
        await self._ring.refresh()
        return web.json_response({"key": new_key, "token_id": new.token, **key_view(new)})

    async def info(self, request: web.Request) -> web.Response:
        key = request.query.get("key")
        if not key:
            raise InvalidRequest("Missing required parameter: 'key'.", "key")
        await self._ring.ledger.flushed()  # its spend counts every request ended here
        await self._ring.refresh()
        r = self._record(key)
        return web.json_response({"key": key, "info": key_view(r)})

    async def list_keys(self, request: web.Request) -> web.Response:
        """LiteLLM's: a page (`page` from 1, `size` 1 to 100, default 10) of the keys' tokens,
        or (`return_full_object=true`) of their rows, oldest first; `team_id` narrows it."""
        q = request.query
        page, size = _count(q, "page", 1, None), _count(q, "size", 10, 100)
        await self._ring.refresh()
        team = q.get("team_id")
        rows = [r for r in self._ring.keys.values() if team is None or r.team_id == team]
        rows.sort(key=lambda r: (r.created_at, r.token))
        shown = rows[(page - 1) * size : page * size]
        full = q.get("return_full_object", "false").lower() == "true"
        keys: list[Any] = [key_view(r) for r in shown] if full else [r.token for r in shown]
        body = {"keys": keys, "total_count": len(rows), "current_page": page}
        body["total_pages"] = max(1, -(-len(rows) // size))
        return web.json_response(body)

    # -- teams -----------------------------------------------------------------------------
    async def new_team(self, request: web.Request) -> web.Response:
        b = await self._body(request, NewTeam)
        _duration("budget_duration", b.budget_duration)
        now = time.time()
        t = TeamRecord(
            team_id=b.team_id or str(uuid.uuid4()), team_alias=b.team_alias, **_limits(b, now)
        )
        try:
            await self._ring.store.insert("teams", t)
        except Conflict:
            raise InvalidRequest(f"Team id {t.team_id} exists already.", "team_id") from None
        await self._ring.refresh()
        return web.json_response(team_view(t))

    async def update_team(self, request: web.Request) -> web.Response:
        b = await self._body(request, UpdateTeam)
        _duration("budget_duration", b.budget_duration)
        await self._ring.refresh()
        t = self._ring.teams.get(b.team_id)
        if t is None:
            raise ModelNotFound(f"Team not found: {b.team_id}", "team_id")
        changes: dict[str, object] = {
            f: getattr(b, f) for f in NewTeam.__struct_fields__ if getattr(b, f) is not None
        }
        if b.budget_duration is not None and b.budget_duration != t.budget_duration:
            changes["budget_reset_at"] = _after(b.budget_duration, time.time())
        if not await self._ring.store.update("teams", b.team_id, changes):
            raise ModelNotFound(f"Team not found: {b.team_id}", "team_id")
        await self._ring.refresh()
        return web.json_response(team_view(self._ring.teams[b.team_id]))

    async def list_teams(self, request: web.Request) -> web.Response:
        """The store's teams, and the config file's tenants (`source` says which)."""
        await self._ring.refresh()
        teams = [{"source": "store", **team_view(t)} for t in self._ring.teams.values()]
        named = {t["team_id"] for t in teams}
        teams += [
            {"source": "config", "team_id": name, "team_alias": None}
            for name in self._tenants()
            if name not in named
        ]
        return web.json_response(teams)

    async def team_info(self, request: web.Request) -> web.Response:
        team_id = request.query.get("team_id")
        if not team_id:
            raise InvalidRequest("Missing required parameter: 'team_id'.", "team_id")
        await self._ring.ledger.flushed()
        await self._ring.refresh()
        t = self._ring.teams.get(team_id)
        if t is None:
            raise ModelNotFound(f"Team not found: {team_id}", "team_id")
        keys = [key_view(r) for r in self._ring.keys.values() if r.team_id == team_id]
        return web.json_response({"team_id": team_id, "team_info": team_view(t), "keys": keys})
