"""The lean path's response bytes: heads and HTTP chunks. Pure."""

from __future__ import annotations

from email.utils import formatdate
from http import HTTPStatus
from typing import Final

__all__ = ["LAST_CHUNK", "chunk", "http_date", "reply", "stream_head"]

LAST_CHUNK: Final = b"0\r\n\r\n"
_CRLF: Final = "\r\n"
_STATUS: Final = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n" for s in HTTPStatus}
_CLOSE: Final = "Connection: close\r\n"


_last_date: list[tuple[int, str]] = [(0, "")]


def http_date(now: float) -> str:
    """The `Date` of a response sent at `now` (unix time): RFC 9110's IMF-fixdate, formatted
    once a second."""
    second = int(now)
    cached = _last_date[0]
    if cached[0] != second:
        cached = _last_date[0] = (second, formatdate(second, usegmt=True))
    return cached[1]


def _fields(headers: dict[str, str]) -> str:
    lines = []
    for name, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"the response header {name!r} holds a line break")
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines)


def reply(status: int, headers: dict[str, str], body: bytes, close: bool, date: str) -> bytes:
    """A whole response with a JSON body."""
    line = _STATUS.get(status) or f"HTTP/1.1 {status} Unknown\r\n"
    connection = _CLOSE if close else ""
    head = (
        f"{line}Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"Date: {date}\r\n{_fields(headers)}{connection}{_CRLF}"
    )
    return head.encode() + body


def stream_head(headers: dict[str, str], close: bool, date: str) -> bytes:
    """The head of a 200 whose body travels in chunks."""
    connection = _CLOSE if close else ""
    fields = _fields(headers)
    return (
        f"HTTP/1.1 200 OK\r\nDate: {date}\r\n{fields}{connection}Transfer-Encoding: chunked\r\n\r\n"
    ).encode()


def chunk(data: bytes) -> bytes:
    """One HTTP chunk (nothing for no data: an empty chunk would end the body)."""
    return b"%x\r\n%b\r\n" % (len(data), data) if data else b""
