"""SSE events of a kept stream: each leaves with `id: <stream_id>:<seq>` and is kept in the
stream's log as it was sent (comments such as keep-alives pass through, not kept)."""

from __future__ import annotations

from gateway.streams.store import StreamLog


class Tape:
    __slots__ = ("_prefix", "log")

    def __init__(self, log: StreamLog) -> None:
        self.log = log
        self._prefix = b"id: " + log.sid.encode() + b":"

    def stamp(self, data: bytes | bytearray) -> bytes:
        """`data` (whole SSE events) with an id on each event, every event kept."""
        parts = data.split(b"\n\n")
        rest = parts.pop()  # after the last event's blank line: nothing, normally
        log = self.log
        if not rest and data[:1] != b":" and b"\n\n:" not in data:  # events only
            seq = log.next_seq
            prefix = self._prefix
            frames = [b"%s%d\n%s\n\n" % (prefix, seq + i, ev) for i, ev in enumerate(parts)]
            log.extend(frames)
            return b"".join(frames)
        out = []
        prefix = self._prefix
        for ev in parts:
            if ev[:1] == b":":
                out.append(ev + b"\n\n")
                continue
            frame = b"%s%d\n%s\n\n" % (prefix, log.next_seq, ev)
            log.append(frame)
            out.append(frame)
        if rest:
            out.append(rest)
        return b"".join(out)


def parse_last_event_id(value: str, sid: str) -> int | None:
    """The sequence number in a Last-Event-ID of stream `sid` (None: not one of its ids)."""
    name, sep, seq = value.strip().rpartition(":")
    if not sep or name != sid or not seq.isdigit() or len(seq) > 18:
        return None
    return int(seq)
