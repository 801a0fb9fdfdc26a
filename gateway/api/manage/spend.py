"""GET /spend/logs: the ledger, as LiteLLM's endpoint answers it (a JSON array of rows), or as
CSV (`format=csv`). Filters: `api_key` (the key or its hash), `team_id`, `request_id`, and a
period, `start_date` and `end_date` (YYYY-MM-DD, the end day included, or ISO 8601 times)."""

from __future__ import annotations

import csv
import io
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from aiohttp import web

from gateway.api.manage.keys import iso, token_of
from gateway.runtime.keyring import Keyring
from gateway.store.records import LedgerRow
from gateway.types import InvalidRequest, Unavailable

MAX_ROWS: Final = 100_000  # one answer at most: narrow the period for more
_PARAMS: Final = frozenset(
    {"api_key", "team_id", "request_id", "start_date", "end_date", "format", "limit"}
)
CSV_FIELDS: Final = (
    "request_id",
    "api_key",
    "team_id",
    "model",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "total_tokens",
    "spend",
    "status",
    "startTime",
    "endTime",
)


def _time(name: str, text: str | None, end: bool) -> float | None:
    if text is None:
        return None
    try:
        d = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidRequest(
            f"Invalid value for '{name}': use YYYY-MM-DD or an ISO 8601 time.", name
        ) from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=UTC)
    if end and len(text) == 10:  # a day: all of it
        d += timedelta(days=1)
    return d.timestamp()


async def behind(keyring: Keyring) -> None:
    """Every row ended here written before the ledger is read; a 503 when the store is behind."""
    if not await keyring.ledger.flushed():
        raise Unavailable("The ledger's rows are still being written: try again.", None)


def row_view(r: LedgerRow) -> dict[str, Any]:
    return {
        "request_id": r.request_id,
        "api_key": r.token or "",
        "team_id": r.team_id,
        "model": r.model,
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "cached_tokens": r.cached_tokens,
        "total_tokens": r.prompt_tokens + r.completion_tokens,
        "spend": r.spend,
        "status": r.status,
        "startTime": iso(r.start_time),
        "endTime": iso(r.end_time),
    }


def spend_logs(keyring: Keyring) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        q = request.query
        for name in q:
            if name not in _PARAMS:
                raise InvalidRequest(f"Unrecognized query parameter: {name}", name)
        fmt = q.get("format", "json")
        if fmt not in ("json", "csv"):
            raise InvalidRequest("Invalid value for 'format': json or csv.", "format")
        try:
            limit = int(q.get("limit", MAX_ROWS))
        except ValueError:
            limit = 0
        if not 0 < limit <= MAX_ROWS:
            raise InvalidRequest(f"Invalid value for 'limit': 1 to {MAX_ROWS}.", "limit")
        key = q.get("api_key")
        await behind(keyring)
        rows = await keyring.store.spend_logs(
            start=_time("start_date", q.get("start_date"), False),
            end=_time("end_date", q.get("end_date"), True),
            token=None if key is None else token_of(key, keyring.keys),
            team_id=q.get("team_id"),
            request_id=q.get("request_id"),
            limit=limit,
        )
        views = [row_view(r) for r in rows]
        if fmt == "json":
            return web.json_response(views)
        out = io.StringIO()
        w = csv.DictWriter(out, CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(views)
        return web.Response(text=out.getvalue(), content_type="text/csv")

    return handler


def daily(keyring: Keyring) -> Callable[[web.Request], Awaitable[web.Response]]:
    """GET /admin/spend/daily?days=N (default 30): spend and requests per UTC day, every day
    of the period listed; and the `recent` rows, newest first (at most 20)."""

    async def handler(request: web.Request) -> web.Response:
        try:
            days = int(request.query.get("days", "30"))
        except ValueError:
            days = 0
        if not 0 < days <= 366:
            raise InvalidRequest("Invalid value for 'days': 1 to 366.", "days")
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        first = today - timedelta(days=days - 1)
        await behind(keyring)
        got = await keyring.store.daily(first.timestamp())
        recent = await keyring.store.spend_logs(
            start=first.timestamp(), limit=20, newest_first=True
        )
        out = []
        for i in range(days):
            day = (first + timedelta(days=i)).strftime("%Y-%m-%d")
            usd, n = got.get(day, (0.0, 0))
            out.append({"day": day, "spend": usd, "requests": n})
        return web.json_response({"days": out, "recent": [row_view(r) for r in recent]})

    return handler
