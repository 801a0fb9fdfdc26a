"""Start a generation on a replica and hand back its stream."""

from __future__ import annotations

import random

from gateway.policy.routing import Candidate, least_loaded
from gateway.runtime.fleet import Fleet
from gateway.runtime.stream import ResponseStream
from gateway.types import Delta, GenerationRequest, ModelNotFound, Unavailable
from gateway.upstream.link import EngineLink


class Generation:
    """A running request: take its output; close it (aborting the engine work if unfinished)."""

    __slots__ = ("key", "link", "request", "stream")

    def __init__(
        self, request: GenerationRequest, link: EngineLink, key: int, stream: ResponseStream
    ) -> None:
        self.request = request
        self.link = link
        self.key = key
        self.stream = stream

    @property
    def replica(self) -> str:
        return self.link.address

    async def take(self) -> list[Delta]:
        return await self.stream.take()

    def close(self) -> None:
        if not self.stream.done:
            self.link.abort(self.key)


class Dispatcher:
    def __init__(self, fleet: Fleet, max_pending_deltas: int, seed: int | None = None) -> None:
        self._fleet = fleet
        self._max_pending = max_pending_deltas
        self._rng = random.Random(seed)

    def start(self, req: GenerationRequest) -> Generation:
        links = self._fleet.candidates(req.model)
        if not links:
            if not self._fleet.knows(req.model):
                raise ModelNotFound(f"The model `{req.model}` does not exist.", "model")
            raise Unavailable(f"No healthy replica serves `{req.model}` right now.")
        link = links[0] if len(links) == 1 else links[self._pick(links)]
        stream = ResponseStream(self._max_pending)
        key = link.submit(req, stream)
        return Generation(req, link, key, stream)

    def _pick(self, links: list[EngineLink]) -> int:
        cands = []
        for link in links:
            load = link.load
            assert load is not None and link.info is not None
            cands.append(
                Candidate(
                    link.name,
                    link.inflight,
                    load.running,
                    load.waiting,
                    load.max_num_seqs or link.info.max_num_seqs,
                )
            )
        return least_loaded(cands, self._rng)
