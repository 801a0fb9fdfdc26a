"""SSE events of a kept stream: each leaves with `id: <stream_id>:<seq>` and is kept in the
stream's log as it was sent (comments such as keep-alives pass through, not kept)."""

from __future__ import annotations

from gateway.streams.store import StreamLog


class Tape:
    __slots__ = ("log", "prefix")

    def __init__(self, log: StreamLog) -> None:
        self.log = log
        self.prefix = log.events.id_prefix  # (`id: <stream_id>:`, as the log knows it)

    def stamp(self, data: bytes | bytearray) -> bytes:
        """`data` (whole SSE events) with an id on each event, every event kept."""
        parts = data.split(b"\n\n")
        rest = parts.pop()  # after the last event's blank line: nothing, normally
        log = self.log
        seq = log.next_seq
        prefix = self.prefix
        frames: list[bytes] = []
        out = frames  # what is sent: the frames, and the comments among them
        for ev in parts:
            if ev[:1] == b":":
                if out is frames:
                    out = list(frames)
                out.append(bytes(ev) + b"\n\n")
                continue
            frame = b"%s%d\n%s\n\n" % (prefix, seq, ev)
            seq += 1
            frames.append(frame)
            if out is not frames:
                out.append(frame)
        if frames:
            log.extend(frames)
        if rest:
            out = [*out, bytes(rest)]
        return b"".join(out)


def parse_last_event_id(value: str, sid: str) -> int | None:
    """The sequence number in a Last-Event-ID of stream `sid` (None: not one of its ids)."""
    name, sep, seq = value.strip().rpartition(":")
    if not sep or name != sid or not seq.isdigit() or len(seq) > 18:
        return None
    return int(seq)
