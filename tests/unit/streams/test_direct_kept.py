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


def test_frames_of_a_plain_encoder_are_kept_as_their_text_and_replayed_whole() -> None:
    # The encoder says what surrounds the text in each frame: the log keeps the text's bytes
    # only, and a replay gives back exactly what was sent.
    store = StreamStore(Limits(4, 1 << 20, 60.0), 100, 1 << 20, None, FakeClock())
    log = store.open("t", "sse")
    assert log is not None
    tape = Tape(log)
    for kind in ("chat", "completion"):
        enc = ChunkEncoder("id", "m", 0, kind)  # type: ignore[arg-type]
        t = Transport()
        sink = DirectSink(t, False, enc, Tally(), tape, enc.plain_tokens())  # type: ignore[arg-type]
        before = log.next_seq
        texts = ["a", "b c", 'q"\\', "é\u2028", "x\ud800y", ""]  # (a lone surrogate: scrubbed)
        for i, text in enumerate(texts):
            assert sink(Delta([i + 1], text))
            if i % 2:
                FLUSHER.flush()
        FLUSHER.flush()
        sent = b"".join(t.written)
        kept = log.since(before - 1)
        assert kept is not None and b"".join(kept) == sent
        assert len(kept) == len(texts)
    whole = sum(map(len, log.since(0) or []))
    assert log.events.kept_bytes() < whole / 20  # (the texts' JSON, and nothing else)
    assert (
        store.nbytes
        == log.nbytes
        == log.events.kept_bytes() + EVENT_OVERHEAD * log.next_seq - EVENT_OVERHEAD
    )
    assert log.whole_bytes == sum(map(len, log.since(0) or [])) + EVENT_OVERHEAD * (
        log.next_seq - 1
    )


def test_a_plain_encoders_token_event_is_its_parts_around_the_texts_json() -> None:
    import orjson

    for kind in ("chat", "completion"):
        enc = ChunkEncoder("cmpl-1", "m", 5, kind)  # type: ignore[arg-type]
        parts = enc.plain_tokens()
        assert parts is not None
        for text in ["", "a", '\n\t"\\', "é€𝄞", "\u2028\u2029", "x\ud800"]:
            buf = bytearray()
            enc.token_chunk_into(buf, text)
            assert buf.startswith(parts[0]) and buf.endswith(parts[1])
            own = bytes(buf[len(parts[0]) : len(buf) - len(parts[1])])
            assert isinstance(orjson.loads(own), str)
    with_lps = ChunkEncoder("cmpl-1", "m", 5, "chat", lambda lps: None)  # type: ignore[arg-type]
    assert with_lps.plain_tokens() is None
