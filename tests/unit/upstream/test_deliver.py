"""A request whose handling fails on its delta ends alone: the link and its other requests go
on (the link reader hands deltas out inside the socket's read callback)."""

from __future__ import annotations

from shardgate.v1 import engine_pb2 as pb
from shardgate.v1.wire import WireDelta

from gateway.config.schema import LinkSettings
from gateway.types import Delta, GatewayError
from gateway.upstream.link import EngineLink


class Target:
    def __init__(self, broken: bool = False) -> None:
        self.broken = broken
        self.got: list[Delta] = []
        self.errors: list[GatewayError] = []

    def push(self, delta: Delta) -> None:
        if self.broken:
            raise RuntimeError("a bug in this request's handling")
        self.got.append(delta)

    def fail(self, error: GatewayError) -> None:
        self.errors.append(error)


def connected_link() -> EngineLink:
    link = EngineLink("s", "127.0.0.1:1", LinkSettings())
    link.connected = True
    return link


def test_a_failing_request_ends_alone_and_is_aborted_on_the_engine() -> None:
    link = connected_link()
    good, bad, later = Target(), Target(broken=True), Target()
    for key, t in ((1, good), (2, bad), (3, later)):
        link.streams[key] = t
    link.deliver([WireDelta(1, [10], "a"), WireDelta(2, [20], "b"), WireDelta(3, [30], "c")])
    assert [d.token_ids for d in good.got] == [[10]]
    assert [d.token_ids for d in later.got] == [[30]]  # after the failing one, in the same call
    [error] = bad.errors
    # The gateway's own failure: not retried elsewhere, not counted against the replica.
    assert type(error) is GatewayError and error.status == 500 and "a bug" in error.message
    assert set(link.streams) == {1, 3}
    out = link.take_outgoing()
    assert out is not None and out[1] == [2]  # the engine is told to stop it
    # The link goes on: the others keep streaming and finish.
    link.deliver([WireDelta(1, [11], "d", pb.FINISH_LENGTH, 1, 0, 2), WireDelta(3, [31], "e")])
    assert [d.token_ids for d in good.got] == [[10], [11]] and not good.errors
    assert set(link.streams) == {3}
