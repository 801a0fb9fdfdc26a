"""The TCP link: engine.proto's `Link` stream as length-prefixed msgpack frames.

A sidecar that announces `InfoReply.link_port` also serves its Link there, on a plain TCP
socket. The messages are the gRPC Link's, field for field, in msgpack (arrays, not maps);
only what travels once per link or per heartbeat (the announcement, load reports) and the
engine's KV cache changes (packed block names) stay serialized protobuf inside the frame.
Per engine step and per request this costs a fraction of what grpc.aio and protobuf objects
cost on each side (see bench/RESULTS.md).

A connection starts with the gateway writing `MAGIC`; then each side writes frames: a 4-byte
little-endian body length, then the body. The gateway writes `Up` bodies (engine.proto
`LinkRequest`), the sidecar `Down` bodies (`LinkResponse`), its first one carrying `info` (and
a later one again when what the sidecar serves changes).
A frame over `MAX_FRAME` bytes, or a body that does not decode, ends the connection.
"""

from __future__ import annotations

import struct
from typing import Annotated

import msgspec

from shardgate.v1.params import PROTOCOL_VERSION, Generation, Logprobs

# "SGL" and the link protocol's version: a sidecar refuses a gateway that speaks another.
MAGIC_PREFIX = b"SGL"
MAGIC = MAGIC_PREFIX + bytes([PROTOCOL_VERSION])
MAX_FRAME = 64 << 20
_LEN = struct.Struct("<I")
# engine.proto's token ids are int32s: a frame with one out of that range does not decode.
TokenId = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]


class WireDelta(msgspec.Struct, array_like=True, gc=False):
    """engine.proto `Delta`, same fields in the same meaning."""

    key: int
    token_ids: list[TokenId] = []
    text: str = ""
    finish: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    error_code: int = 0
    error_message: str = ""
    error_field: str = ""
    logprobs: list[Logprobs] | None = None
    stop_sequence: str = ""
    parsed: bytes = b""
    prompt_logprobs: list[Logprobs] | None = None


class WireSubmit(msgspec.Struct, array_like=True, gc=False):
    """engine.proto `SubmitRequest`: its `generation` travels as itself here."""

    key: int
    generation: Generation
    resume_token_ids: list[int] = []


class Down(msgspec.Struct, array_like=True, gc=False):
    """engine.proto `LinkResponse`: `load`, `info` and `kv` are serialized `LoadReport`,
    `InfoReply` and `KvEvents`."""

    deltas: list[WireDelta] = []
    load: bytes = b""
    info: bytes = b""
    kv: bytes = b""


class Up(msgspec.Struct, array_like=True, gc=False):
    """engine.proto `LinkRequest`."""

    submits: list[WireSubmit] = []
    aborts: list[int] = []


class FrameError(Exception):
    """The peer broke the framing: the connection must end."""


def frame(body: bytes) -> bytes:
    return _LEN.pack(len(body)) + body


class FrameReader:
    """Splits a byte stream into frame bodies; holds at most one partial frame."""

    __slots__ = ("_limit", "_need", "_partial")

    def __init__(self, limit: int = MAX_FRAME) -> None:
        self._partial = bytearray()
        self._need = 0  # bytes the partial frame needs before it is worth parsing
        self._limit = limit

    def feed(self, data: bytes) -> list[bytes]:
        """The bodies that `data` completes, in order."""
        if self._partial:
            self._partial += data
            if len(self._partial) < self._need:
                return []
            data = bytes(self._partial)
            self._partial = bytearray()
        pos = 0
        end = len(data)
        out = []
        need = 4
        while end - pos >= 4:
            (size,) = _LEN.unpack_from(data, pos)
            if size > self._limit:
                raise FrameError(f"frame of {size} bytes is over the limit of {self._limit}")
            need = 4 + size
            if end - pos < need:
                break
            out.append(data[pos + 4 : pos + need])
            pos += need
            need = 4
        if pos < end:
            self._partial = bytearray(data[pos:])
            self._need = need
        return out
