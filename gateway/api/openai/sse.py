"""What the OpenAI edge's streaming and its answers share: SSE response parts, the tally of a
generation's usage and finish, and the response headers of a job."""

from __future__ import annotations

from aiohttp import web

from gateway.runtime.job import Job
from gateway.types import FINISH_REASON, Delta, Finish, InvalidRequest, Usage

KEEPALIVE = b": keep-alive\n\n"

SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",  # (as vllm serve sends it)
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


def parse_priority(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InvalidRequest("x-priority must be an integer", "x-priority") from None


class Tally:
    """Usage and finish of a generation, from its deltas."""

    __slots__ = ("cached", "completion", "counted", "finish", "prompt")

    def __init__(self) -> None:
        self.prompt = 0
        self.cached = 0
        self.completion = 0
        self.counted = 0
        self.finish = Finish.NONE

    def add(self, d: Delta) -> None:
        self.counted += len(d.token_ids)
        if d.prompt_tokens:
            self.prompt = d.prompt_tokens
            self.cached = d.cached_tokens
        if d.finish:
            self.finish = d.finish
            self.completion = d.completion_tokens

    def usage(self) -> Usage:
        return Usage(self.prompt, self.completion or self.counted, self.cached)

    @property
    def reason(self) -> str:
        return FINISH_REASON.get(self.finish, "stop")


def response_headers(gen: Job) -> dict[str, str]:
    """Rate-limit values and the replica that took the request (once one has)."""
    out = dict(gen.headers)
    if gen.first_replica:
        out["x-shardgate-replica"] = gen.first_replica
    return out


class SSEResponse(web.StreamResponse):
    """Holds its headers back until the first write, so that they leave in the same send() as
    the first chunk (an SSE response always writes one right after prepare())."""

    _send_headers_immediately = False
