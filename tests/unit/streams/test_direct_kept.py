"""A kept stream's token frames written straight from the link reader: each numbered and kept,
several in one flush as well as one, and kept even when its client has gone."""

from __future__ import annotations

from gateway.api.openai.direct import DirectSink
from gateway.api.openai.encode import ChunkEncoder
from gateway.api.openai.sse import Tally
from gateway.runtime.flush import FLUSHER
from gateway.streams.policy import Limits
from gateway.streams.sse import Tape
from gateway.streams.store import EVENT_OVERHEAD, StreamStore
from gateway.types import Delta
from tests.unit.policy._util import FakeClock


class Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data: bytes) -> None:
        self.written.append(data)


def test_frames_are_numbered_kept_and_sent_in_order() -> None:
    store = StreamStore(Limits(4, 1 << 20, 60.0), 100, 1 << 20, None, FakeClock())
    log = store.open("t", "sse")
    assert log is not None
    log.append(b"id: x:1\ndata: role\n\n")  # the handler's first event
    t = Transport()
    enc = ChunkEncoder("id", "m", 0, "completion")
    sink = DirectSink(t, False, enc, Tally(), Tape(log))  # type: ignore[arg-type]
    assert sink(Delta([1], "a")) and sink(Delta([2], "b"))
    FLUSHER.flush()
    assert sink(Delta([3], "c"))
    t.closing = True  # the client left before the flush: the frame is still kept
    FLUSHER.flush()
    kept = log.since(1)
    assert kept is not None and len(kept) == 3
    for seq, (frame, text) in enumerate(zip(kept, "abc", strict=True), start=2):
        assert frame.startswith(f"id: {log.sid}:{seq}\ndata: ".encode())
        assert frame.endswith(b"\n\n") and f'"text":"{text}"'.encode() in frame
    assert t.written == [kept[0] + kept[1]]
    events = log.since(0) or []
    assert len(events) == len(log.events) == 4
    held = log.events.kept_bytes()  # (as kept: the last one packed, compact.py)
    assert held < sum(map(len, events))
    assert store.nbytes == log.nbytes == held + EVENT_OVERHEAD * len(events)
