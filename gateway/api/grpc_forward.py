"""`--workers N`: a gRPC Resume that reaches a worker other than the one that keeps its stream
is handed to that one over its Unix socket (gateway/api/forward.py), as HTTP reattaches are.

The owner answers `GET /internal/grpc/resume/{stream_id}?after=N` (the caller's Authorization
with it: the owner resolves the tenant) with frames: a kind byte, a 4-byte big-endian length,
the payload. `m`: one GenerateResponse, serialized; `k`: a keep-alive (nothing new for
`keepalive_s`); `s`: the end, the status as JSON `{"code": <grpc code>, "details": ...}`.
The worker the caller reached yields the responses and ends the call with that status.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Callable
from typing import Final, NoReturn
from urllib.parse import quote

import aiohttp
import grpc
import msgspec
from aiohttp import web
from google.protobuf.message import DecodeError
from shardgate.v1 import gateway_pb2 as pb

from gateway.api.forward import WRITE_TIMEOUT_S, Forwarder
from gateway.api.grpc_streams import resume
from gateway.policy.tenants import GRPC_METADATA, Tenants, bearer_key
from gateway.streams.hub import Streams
from gateway.types import GatewayError, InvalidRequest

PATH: Final = "/internal/grpc/resume/{stream_id}"
MESSAGE, KEEPALIVE, STATUS = b"m", b"k", b"s"
_HEAD = struct.Struct(">cI")
# The largest frame a forwarded Resume takes (a response is bounded by the stream's own bound).
MAX_FRAME_BYTES = 64 << 20
MAX_ERROR_BYTES = 1 << 16

_BY_VALUE: Final = {c.value[0]: c for c in grpc.StatusCode}
_OF_HTTP: Final = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    404: grpc.StatusCode.NOT_FOUND,
    503: grpc.StatusCode.UNAVAILABLE,
}


class Status(msgspec.Struct, frozen=True):
    code: int
    details: str = ""


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    return _HEAD.pack(kind, len(payload)) + payload


def code_of(value: int) -> grpc.StatusCode:
    return _BY_VALUE.get(value, grpc.StatusCode.UNKNOWN)


class _Ended(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class _Channel:
    """`resume`'s context on the owner: an abort ends the forwarded stream with its status."""

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        raise _Ended(code, details)


class ResumeOwner:
    """The owner's side: a forwarded Resume, served from this worker's store."""

    def __init__(
        self,
        streams: Streams,
        tenants: Callable[[], Tenants],
        keepalive_s: Callable[[], float],
    ) -> None:
        """`tenants()`, `keepalive_s()`: as the config now has them."""
        self.streams = streams
        self.tenants = tenants
        self.keepalive_s = keepalive_s

    async def handle(self, request: web.Request) -> web.StreamResponse:
        after = request.query.get("after", "0")
        if not after.isascii() or not after.isdigit() or len(after) > 18:
            raise InvalidRequest("after must be a non-negative integer", "after")
        key = bearer_key(request.headers.get("Authorization"))
        tenant = self.tenants().resolve(key, GRPC_METADATA)  # (a gRPC caller's)
        req = pb.ResumeRequest(stream_id=request.match_info["stream_id"], after_seq=int(after))
        resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        await resp.prepare(request)
        end = Status(grpc.StatusCode.OK.value[0])
        try:
            async for out in resume(self.streams, tenant.name, req, _Channel(), self.keepalive_s()):
                data = frame(KEEPALIVE) if out is None else frame(MESSAGE, out.SerializeToString())
                async with asyncio.timeout(WRITE_TIMEOUT_S):
                    await resp.write(data)
        except _Ended as e:
            end = Status(e.code.value[0], e.details)
        async with asyncio.timeout(WRITE_TIMEOUT_S):
            await resp.write(frame(STATUS, msgspec.json.encode(end)))
            await resp.write_eof()
        return resp


async def forward_resume(
    fwd: Forwarder,
    index: int,
    request: pb.ResumeRequest,
    authorization: str | None,
    context: grpc.aio.ServicerContext[pb.ResumeRequest, pb.GenerateResponse],
) -> AsyncIterator[pb.GenerateResponse]:
    """The caller's side: worker `index`'s answer to the Resume, as this call's."""
    path = f"/internal/grpc/resume/{quote(request.stream_id, safe='')}?after={request.after_seq}"
    headers = {} if authorization is None else {"Authorization": authorization}
    try:
        async with fwd.open(index, "GET", path, headers) as up:
            if up.status != 200:
                text = await _error_text(up.content, fwd.idle_s())
                code = _OF_HTTP.get(up.status, grpc.StatusCode.INTERNAL)
                await context.abort(code, text or f"worker {index} answered {up.status}")
            while True:
                kind, payload = await _read(up.content, fwd.idle_s())
                if kind == MESSAGE:
                    yield pb.GenerateResponse.FromString(payload)
                elif kind == STATUS:
                    end = msgspec.json.decode(payload, type=Status)
                    if end.code != grpc.StatusCode.OK.value[0]:
                        await context.abort(code_of(end.code), end.details)
                    return
    except GatewayError as e:  # (the owner did not take it)
        await context.abort(grpc.StatusCode.UNAVAILABLE, e.message)
    except (
        aiohttp.ClientError,
        TimeoutError,
        ValueError,
        OSError,
        EOFError,
        msgspec.DecodeError,
        DecodeError,  # (a frame that is no GenerateResponse)
    ):
        await context.abort(grpc.StatusCode.UNAVAILABLE, f"Worker {index} stopped answering.")


async def _read(content: aiohttp.StreamReader, idle_s: float) -> tuple[bytes, bytes]:
    """One frame (a keep-alive skipped), within the idle bound."""
    while True:
        async with asyncio.timeout(idle_s):
            kind, n = _HEAD.unpack(await content.readexactly(_HEAD.size))
            if n > MAX_FRAME_BYTES:
                raise ValueError(f"a frame of {n} bytes")
            payload = await content.readexactly(n) if n else b""
        if kind != KEEPALIVE:
            return kind, payload


async def _error_text(content: aiohttp.StreamReader, idle_s: float) -> str:
    """The message of the owner's JSON error, if it has one (its first 64 KiB)."""
    body = b""
    async with asyncio.timeout(idle_s):
        while len(body) < MAX_ERROR_BYTES and (chunk := await content.read(MAX_ERROR_BYTES)):
            body += chunk
    try:
        return str(msgspec.json.decode(body)["error"]["message"])
    except (msgspec.DecodeError, KeyError, TypeError):
        return ""
