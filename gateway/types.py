"""The gateway core's own request and output types (wire types stay at the edges)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import msgspec


class Finish(enum.IntEnum):
    NONE = 0
    STOP = 1
    LENGTH = 2
    ABORT = 3
    ERROR = 4


FINISH_REASON = {Finish.STOP: "stop", Finish.LENGTH: "length"}


class Message(msgspec.Struct, frozen=True, gc=False):
    role: str
    content: str


class Sampling(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False


@dataclass(slots=True)
class GenerationRequest:
    """A validated request, whichever API it came from. Exactly one of prompt/messages is set."""

    request_id: str
    model: str
    sampling: Sampling
    prompt: str | None = None
    messages: tuple[Message, ...] | None = None
    stream: bool = False
    include_usage: bool = False
    priority: int | None = None
    session_id: str = ""
    lora: str = ""


@dataclass(slots=True)
class Delta:
    """What one request gained in one engine step (see engine.proto `Delta`)."""

    token_ids: list[int]
    text: str
    finish: Finish = Finish.NONE
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0


def keepalive() -> Delta:
    """An empty delta: the request is alive but waiting (queued or preempted)."""
    return Delta([], "")


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class GatewayError(Exception):
    """An error with an HTTP status, an OpenAI error type and the request field at fault.

    Each API edge maps it: HTTP status + OpenAI error JSON, or a gRPC status code.
    """

    status = 500
    type = "internal_error"
    # For refusals: why, as a closed metrics label (observability.labels.RejectReason).
    reason = ""

    def __init__(
        self,
        message: str,
        param: str | None = None,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        # Extra response headers (rate-limit values, retry-after).
        self.headers = headers


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"


class Unauthorized(GatewayError):
    status = 401
    type = "authentication_error"


class Forbidden(GatewayError):
    status = 403
    type = "permission_error"


class ModelNotFound(GatewayError):
    status = 404
    type = "not_found_error"


class PayloadTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"


class RateLimited(GatewayError):
    status = 429
    type = "rate_limit_error"


class Unavailable(GatewayError):
    status = 503
    type = "service_unavailable"


class GatewayTimeout(GatewayError):
    status = 504
    type = "timeout"


class UpstreamError(GatewayError):
    status = 502
    type = "upstream_error"
