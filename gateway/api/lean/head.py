"""Which request heads the lean path serves: parsed by llhttp (httptools), then checked.

The lean path takes a request only when aiohttp would serve it as a plain, whole request to
one of its routes: POST to /v1/chat/completions or /v1/completions over HTTP/1.1, a body of one
`Content-Length` within the body limit, no `Transfer-Encoding`, `Expect`, `Upgrade` or
`Content-Encoding`, no repeated header, ASCII header values, within the head limits. Anything
else (garbage included: llhttp refuses it first) is aiohttp's to answer, so every refusal the
edge makes stays aiohttp's own.
"""

from __future__ import annotations

from typing import Final, Literal

import httptools

from gateway.policy.objectives import TPOT_HEADER, TTFT_HEADER
from gateway.streams.ask import RESUMABLE_HEADER

__all__ = ["KEPT", "LEAN_PATHS", "Head", "HeadLimits", "HeadReader", "Verdict"]

Kind = Literal["chat", "completion"]
LEAN_PATHS: Final[dict[bytes, Kind]] = {
    b"/v1/chat/completions": "chat",
    b"/v1/completions": "completion",
}
# A head still incomplete at this size is aiohttp's (it answers oversized heads).
MAX_HEAD_BYTES: Final = 8192
_REFUSED: Final = frozenset({"transfer-encoding", "expect", "upgrade", "content-encoding"})
_CONNECTION: Final = {None: False, "keep-alive": False, "close": True}
# The headers a served request keeps, for its handler (`LeanExchange.header`): the rest are
# checked and dropped, not held for the life of a stream (the OpenAI SDK sends ~15).
KEPT: Final = frozenset(
    {
        "authorization",
        "x-priority",
        "x-request-id",
        "x-session-id",
        RESUMABLE_HEADER,
        TTFT_HEADER,
        TPOT_HEADER,
    }
)


class HeadLimits:
    __slots__ = ("max_body_bytes", "max_field", "max_headers", "max_line")

    def __init__(self, max_line: int, max_field: int, max_headers: int, max_body: int) -> None:
        self.max_line = max_line
        self.max_field = max_field
        self.max_headers = max_headers
        self.max_body_bytes = max_body


class Head:
    """A request head the lean path serves."""

    __slots__ = ("close", "headers", "kind", "length", "path")

    def __init__(
        self, kind: Kind, path: str, headers: dict[str, str], length: int, close: bool
    ) -> None:
        self.kind = kind
        self.path = path
        self.headers = headers  # of those KEPT, by lower-case name
        self.length = length  # of the body
        self.close = close  # the client asked for `Connection: close`


Verdict = Head | Literal[False] | None  # the head; not lean; more bytes needed


class _Fields:
    """What httptools reports of a head (its callbacks): apart from the reader, so that the
    parser, which holds its callbacks, and the reader, which holds the parser, make no cycle
    (a request's reader is freed when it is dropped, not by the cyclic collector)."""

    __slots__ = ("complete", "fields", "url")

    def __init__(self) -> None:
        self.url = b""
        self.fields: list[tuple[bytes, bytes]] = []
        self.complete = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name, value))

    def on_headers_complete(self) -> None:
        self.complete = True


class HeadReader:
    """One request's head, fed as it arrives (`feed`)."""

    __slots__ = ("_got", "_limits", "_parser", "_size")

    def __init__(self, limits: HeadLimits) -> None:
        self._limits = limits
        self._got = _Fields()
        self._parser = httptools.HttpRequestParser(self._got)
        self._size = 0

    # -- the verdict -------------------------------------------------------------------------
    def feed(self, data: bytes, whole: bool) -> Verdict:
        """`data`: the head's next bytes; `whole`: they end with the head's empty line."""
        self._size += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            return False
        got = self._got
        if whole:
            return self._head() if got.complete else False
        if self._size > MAX_HEAD_BYTES or got.complete:
            return False
        if got.fields and (
            got.url.partition(b"?")[0] not in LEAN_PATHS or self._parser.get_method() != b"POST"
        ):
            return False  # (its request line is whole)
        return None

    def _head(self) -> Head | Literal[False]:
        parser, limits, got = self._parser, self._limits, self._got
        url = got.url
        path, _, _ = url.partition(b"?")
        kind = LEAN_PATHS.get(path)
        if kind is None or b"#" in url or parser.get_method() != b"POST":
            return False
        if parser.get_http_version() != "1.1" or len(url) + 14 > limits.max_line:
            return False
        fields = got.fields
        if len(fields) > limits.max_headers:
            return False
        headers: dict[str, str] = {}
        seen: set[str] = set()
        length = connection = ""
        for raw_name, raw_value in fields:
            if len(raw_name) > limits.max_field or len(raw_value) > limits.max_field:
                return False
            if not raw_value.isascii():
                return False
            name = raw_name.decode("ascii").lower()
            if name in seen or name in _REFUSED:
                return False
            seen.add(name)
            if name in KEPT:
                headers[name] = raw_value.decode("ascii")
            elif name == "content-length":
                length = raw_value.decode("ascii")
            elif name == "connection":
                connection = raw_value.decode("ascii")
        if not length.isdigit() or len(length) > 18:
            return False
        size = int(length)
        if size > limits.max_body_bytes:
            return False
        close = _CONNECTION.get(connection.lower() or None)
        if close is None:
            return False
        return Head(kind, path.decode("ascii"), headers, size, close)
