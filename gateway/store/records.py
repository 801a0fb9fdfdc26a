"""The rows of the store, as the gateway reads and writes them (times are Unix seconds)."""

from __future__ import annotations

import msgspec


class KeyRecord(msgspec.Struct, kw_only=True):
    token: str  # SHA-256 of the key, hex (as LiteLLM's `token`): the key itself is never kept
    key_name: str  # what the key is shown as once made: "sk-...abcd"
    key_alias: str | None = None
    team_id: str | None = None  # the tenant its requests count to
    models: list[str] = []  # those it may call (empty: every model)
    max_budget: float | None = None
    budget_duration: str | None = None
    budget_reset_at: float | None = None
    spend: float = 0.0  # in the current budget window (lifetime without a window)
    tpm_limit: int | None = None
    rpm_limit: int | None = None
    metadata: dict[str, object] = {}
    expires: float | None = None
    created_at: float = 0.0


class TeamRecord(msgspec.Struct, kw_only=True):
    team_id: str
    team_alias: str | None = None
    models: list[str] = []
    max_budget: float | None = None
    budget_duration: str | None = None
    budget_reset_at: float | None = None
    spend: float = 0.0
    tpm_limit: int | None = None
    rpm_limit: int | None = None
    metadata: dict[str, object] = {}
    created_at: float = 0.0


class LedgerRow(msgspec.Struct, kw_only=True):
    id: str  # made by the gateway, once per request: the row is written once
    request_id: str  # the request's id (the response's `id`; a client's x-request-id)
    token: str | None  # the store key's hash (None: a config file's key, or none)
    team_id: str  # the tenant
    model: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    spend: float
    status: str
    start_time: float
    end_time: float


class Reset(msgspec.Struct, kw_only=True):
    """A budget window rolled: its spend starts again from 0, once (the first instance wins)."""

    table: str  # "keys" or "teams"
    id: str
    old_reset_at: float | None
    new_reset_at: float


class Snapshot(msgspec.Struct, kw_only=True):
    version: int
    keys: list[KeyRecord]
    teams: list[TeamRecord]
