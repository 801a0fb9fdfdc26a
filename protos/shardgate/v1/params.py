"""A request's engine parameters, defined once.

The gateway's edges decode a request into a `Generation`; it travels unchanged to the sidecar's
backend: as itself inside the TCP link's msgpack frames (shardgate/v1/wire.py), as its msgpack
bytes inside engine.proto's `SubmitRequest.generation` on the gRPC link. Nothing converts it
field by field on the way, so a field added here reaches every engine (or is refused by name
where an engine cannot honour it).

`PROTOCOL_VERSION` is the link's: the gateway and the sidecar each say theirs when the link
starts (the TCP link's magic, the gRPC Link call's metadata, the sidecar's `Info`), and refuse a
peer that speaks another, with an error that says so, instead of misreading its messages.
"""

from __future__ import annotations

import enum
from typing import Final

import msgspec

PROTOCOL_VERSION: Final = 2
# gRPC metadata key of the gateway's protocol version on the Link call.
PROTOCOL_METADATA: Final = "shardgate-link-protocol"


class Finish(enum.IntEnum):
    """Why a request ended; the values are engine.proto's `Finish`."""

    NONE = 0
    STOP = 1
    LENGTH = 2
    ABORT = 3
    ERROR = 4


class Message(msgspec.Struct, frozen=True, array_like=True, gc=False):
    role: str
    content: str


class Sampling(msgspec.Struct, frozen=True, array_like=True, gc=False, kw_only=True):
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False


class Generation(msgspec.Struct, array_like=True, gc=False, kw_only=True):
    """What an engine needs to run a request. Exactly one of prompt / messages /
    prompt_token_ids is set."""

    request_id: str
    model: str
    sampling: Sampling
    prompt: str | None = None
    messages: tuple[Message, ...] | None = None
    prompt_token_ids: tuple[int, ...] | None = None
    priority: int = 0  # higher runs first
    lora: str = ""


_ENCODE = msgspec.msgpack.Encoder()
_DECODE = msgspec.msgpack.Decoder(Generation)


def encode(g: Generation) -> bytes:
    return _ENCODE.encode(g)


def decode(data: bytes) -> Generation:
    """Raises msgspec.ValidationError / DecodeError on bytes that are not a Generation."""
    return _DECODE.decode(data)
