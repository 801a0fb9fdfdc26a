"""Decoding of an HTTP/1.1 chunked body, fed in arbitrary pieces."""

from __future__ import annotations

MAX_LINE = 4096

_SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(5)


class ChunkedError(ValueError):
    pass


def _size(line: bytes) -> int:
    try:
        size = int(line, 16)
    except ValueError:
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)  # a chunk extension
        except ValueError:
            raise ChunkedError(f"bad chunk size {line[:20]!r}") from None
    if size < 0:
        raise ChunkedError("negative chunk size")
    return size


class ChunkedDecoder:
    __slots__ = ("_buf", "_left", "_state")

    def __init__(self) -> None:
        self._buf = b""
        self._left = 0
        self._state = _SIZE

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        """The payload in `data` and whether the body has ended."""
        buf = self._buf + data if self._buf else data
        self._buf = b""
        out: list[bytes] = []
        pos, n = 0, len(buf)
        while pos < n:
            state = self._state
            if state == _SIZE:
                # Fast path: a whole chunk (size line, data, CRLF) in the buffer.
                end = buf.find(b"\r\n", pos)
                if end >= 0:
                    size = _size(buf[pos:end])
                    start = end + 2
                    stop = start + size
                    if size and stop + 2 <= n:
                        if buf[stop : stop + 2] != b"\r\n":
                            raise ChunkedError("chunk data longer than its size")
                        out.append(buf[start:stop])
                        pos = stop + 2
                        continue
                    pos = start
                    if size == 0:
                        self._state = _TRAILER
                    else:
                        self._left = size
                        self._state = _DATA
                    continue
            elif state == _DATA:
                take = min(self._left, n - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self._left -= take
                if self._left == 0:
                    self._state = _DATA_END
                continue
            elif state == _DONE:
                raise ChunkedError("data after the last chunk")
            end = buf.find(b"\r\n", pos)
            if end < 0:
                if n - pos > MAX_LINE:
                    raise ChunkedError("chunk line too long")
                self._buf = buf[pos:]
                break
            line = buf[pos:end]
            pos = end + 2
            if state == _DATA_END:
                if line:
                    raise ChunkedError("chunk data longer than its size")
                self._state = _SIZE
            elif state == _TRAILER and not line:
                self._state = _DONE
        payload = out[0] if len(out) == 1 else b"".join(out)
        return payload, self._state == _DONE
