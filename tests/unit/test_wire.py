"""The TCP link's framing and messages (protos/shardgate/v1/wire.py)."""

from __future__ import annotations

import msgspec
import pytest
from shardgate.v1 import wire
from shardgate.v1.params import Generation, Message, Sampling

BODIES = [b"", b"a", b"xyz" * 1000, bytes(range(256))]
STREAM = b"".join(wire.frame(b) for b in BODIES)


@pytest.mark.parametrize("chunk", [1, 3, 4, 5, 7, 64, 4096, len(STREAM)])
def test_frames_come_out_whole_however_the_stream_is_cut(chunk: int) -> None:
    reader = wire.FrameReader()
    out: list[bytes] = []
    for i in range(0, len(STREAM), chunk):
        out += reader.feed(STREAM[i : i + chunk])
    assert out == BODIES


def test_a_frame_over_the_limit_is_refused_from_its_header() -> None:
    reader = wire.FrameReader(limit=16)
    assert reader.feed(wire.frame(b"x" * 16)) == [b"x" * 16]
    with pytest.raises(wire.FrameError, match="over the limit"):
        reader.feed((17).to_bytes(4, "little"))  # refused before its body arrives


def test_messages_round_trip_as_arrays() -> None:
    down = wire.Down(deltas=[wire.WireDelta(7, [1, 2], "ab"), wire.WireDelta(8, finish=2)])
    body = msgspec.msgpack.encode(down)
    assert msgspec.msgpack.decode(body, type=wire.Down) == down
    # Positional arrays, not maps: no field names on the wire.
    assert msgspec.msgpack.decode(body)[0][0][:3] == [7, [1, 2], "ab"]
    gen = Generation(
        request_id="r",
        model="m",
        sampling=Sampling(max_tokens=16, seed=3),
        messages=(Message("user", "hi"),),
    )
    up = wire.Up([wire.WireSubmit(1, gen, [5])], [4])
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(up), type=wire.Up) == up
