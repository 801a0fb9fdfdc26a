"""The set of engine links and what they announced: models, groups, load."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from gateway.config.schema import LinkSettings, SidecarEndpoint
from gateway.observability.labels import ReplicaState
from gateway.upstream.link import EngineLink


class Fleet:
    def __init__(self, endpoints: Iterable[SidecarEndpoint], settings: LinkSettings) -> None:
        self.links = [EngineLink(e.name, e.address, settings) for e in endpoints]

    def start(self) -> None:
        for link in self.links:
            link.start()

    async def close(self) -> None:
        await asyncio.gather(*(link.close() for link in self.links))

    async def wait_connected(self, timeout_s: float) -> bool:
        done = await asyncio.gather(*(link.wait_connected(timeout_s) for link in self.links))
        return all(done)

    def models(self) -> dict[str, tuple[int, int]]:
        """Every model announced so far -> (max_model_len, routable replicas)."""
        out: dict[str, tuple[int, int]] = {}
        for link in self.links:
            if link.info is None or link.info.rank != 0:
                continue
            up = 1 if link.routable else 0
            for name, max_len in link.info.models.items():
                prev = out.get(name, (max_len, 0))
                out[name] = (max(prev[0], max_len), prev[1] + up)
        return out

    def heartbeat_ages(self) -> dict[str, float]:
        """Seconds since each link's last load report (for the metrics)."""
        now = time.monotonic()
        return {
            link.address: now - link.last_heartbeat for link in self.links if link.last_heartbeat
        }

    def replica_states(self) -> dict[str, ReplicaState]:
        """Each sidecar's state as the metrics show it."""
        return {
            link.address: ReplicaState.UP if link.routable else ReplicaState.DOWN
            for link in self.links
        }

    def knows(self, model: str) -> bool:
        return any(link.serves(model) for link in self.links)

    def candidates(self, model: str) -> list[EngineLink]:
        """Links that can take a request for `model` now: rank 0, connected, engine ready."""
        return [
            link
            for link in self.links
            if link.routable
            and link.info is not None
            and link.info.rank == 0
            and model in link.info.models
        ]
