"""What the drill reads from the gateway: /metrics (Prometheus text) and /readyz.

Parsing is pure; the two fetches carry their own deadlines.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp
import orjson

MIGRATIONS = "shardgate_migrations_total"
RETRIES = "shardgate_retries_total"
EJECTIONS = "shardgate_ejections_total"
REQUESTS = "shardgate_requests_total"
REPLICA_STATE = "shardgate_replica_state"

# shardgate_replica_state values (gateway.observability.labels.ReplicaState).
DOWN, SUSPECT, UP, EJECTED = 0, 1, 2, 3

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class Series:
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Counters:
    """The gateway's failover counters at one moment, summed over their labels."""

    migrations: float = 0.0
    retries: float = 0.0
    ejections: float = 0.0
    outcomes: Mapping[str, float] = field(default_factory=dict)  # requests_total by outcome

    def minus(self, before: Counters) -> Counters:
        keys = set(self.outcomes) | set(before.outcomes)
        return Counters(
            migrations=self.migrations - before.migrations,
            retries=self.retries - before.retries,
            ejections=self.ejections - before.ejections,
            outcomes={
                k: self.outcomes.get(k, 0.0) - before.outcomes.get(k, 0.0) for k in sorted(keys)
            },
        )


def parse_prometheus(text: str) -> dict[str, list[Series]]:
    """Metric name -> its series (comments and malformed lines skipped)."""
    out: dict[str, list[Series]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = dict(_LABEL.findall(m.group(2) or ""))
        out.setdefault(m.group(1), []).append(Series(labels, value))
    return out


def counters(metrics: Mapping[str, list[Series]]) -> Counters:
    outcomes: dict[str, float] = {}
    for s in metrics.get(REQUESTS, ()):
        key = s.labels.get("outcome", "")
        outcomes[key] = outcomes.get(key, 0.0) + s.value

    def total(name: str) -> float:
        return sum(s.value for s in metrics.get(name, ()))

    return Counters(total(MIGRATIONS), total(RETRIES), total(EJECTIONS), outcomes)


def replica_states(metrics: Mapping[str, list[Series]]) -> dict[str, int]:
    """Sidecar address -> shardgate_replica_state."""
    return {
        s.labels["replica"]: int(s.value)
        for s in metrics.get(REPLICA_STATE, ())
        if "replica" in s.labels
    }


def routable_replicas(readyz: object, model: str) -> int | None:
    """Routable replicas of `model` in a /readyz body (None: the body says nothing about it)."""
    if not isinstance(readyz, dict):
        return None
    models = readyz.get("models")
    if not isinstance(models, dict):
        return None
    n = models.get(model, 0)
    return n if isinstance(n, int) else None


async def fetch_text(session: aiohttp.ClientSession, url: str, timeout_s: float) -> str:
    async with asyncio.timeout(timeout_s), session.get(url) as resp:
        return await resp.text()


async def fetch_metrics(
    session: aiohttp.ClientSession, base_url: str, timeout_s: float = 2.0
) -> dict[str, list[Series]]:
    return parse_prometheus(await fetch_text(session, f"{base_url}/metrics", timeout_s))


async def fetch_readyz(
    session: aiohttp.ClientSession, base_url: str, timeout_s: float = 2.0
) -> object:
    """The /readyz body (its status is 503 while a model has no routable replica)."""
    async with asyncio.timeout(timeout_s), session.get(f"{base_url}/readyz") as resp:
        return orjson.loads(await resp.read())
