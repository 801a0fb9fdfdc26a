"""The stream's own HTTP client, as the first reader of its kept stream; and a stream still
queued when its client left, as a detached producer goes on with it."""

from __future__ import annotations

from gateway.api.openai.exchange import Exchange
from gateway.api.openai.relay import Relay
from gateway.runtime.job import Job
from gateway.types import Delta, GatewayError


class Writer:
    """Replaced by a reader that reattaches: its connection is closed (and the stream goes on
    for the new reader)."""

    __slots__ = ("_request",)

    def __init__(self, request: Exchange) -> None:
        self._request = request

    def replaced(self) -> None:
        transport = self._request.transport
        if transport is not None:
            transport.close()


def client_gone(request: Exchange) -> bool:
    """Its connection is closing (not cancelled for another reason: the gateway stops)."""
    transport = request.transport
    return transport is None or transport.is_closing()


class Unbegun:
    """A stream whose request was still queued when its client left (its head, with the
    stream id, sent; no event yet): its first chunks lead its first output, as they would
    have for the client (the keep-alives meanwhile keep nobody alive: dropped)."""

    __slots__ = ("gen", "relay")

    def __init__(self, relay: Relay, gen: Job) -> None:
        self.relay = relay
        self.gen = gen

    def add(self, batch: list[Delta]) -> None:
        relay = self.relay
        if not relay.begun:
            if not self.gen.began:
                return
            relay.begin(batch)
        relay.add(batch)

    def end(self) -> None:
        self.relay.end()

    def error(self, e: GatewayError) -> None:
        self.relay.error(e)

    def take(self) -> bytes:
        return self.relay.take()
