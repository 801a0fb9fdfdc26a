"""Whether a stream is kept for resume: asked for by its request, its tenant or its route.

A kept stream's SSE events carry `id: <stream_id>:<seq>` lines and its events stay in the
stream store for a client to reattach. A stream nobody asked to keep is what `vllm serve` sends,
byte for byte: unchanged third-party clients (vLLM's benchmark, hand-written SSE readers) parse
exactly that. The request's own word wins (`x-shardgate-resumable`, or `stream_options.resumable`;
the header over the field), then its tenant's `resumable_streams`, then the routes listed in
`gateway.resumable_streams`. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import get_args

from gateway.config.schema import ResumableRoute
from gateway.types import InvalidRequest

# The request header that asks for a kept stream (or, "false", for one that is not).
RESUMABLE_HEADER = "x-shardgate-resumable"

# The routes a config may list in `gateway.resumable_streams`.
CHAT: ResumableRoute = "/v1/chat/completions"
COMPLETIONS: ResumableRoute = "/v1/completions"
GENERATE: ResumableRoute = "shardgate.v1.Gateway/Generate"
ROUTES: tuple[ResumableRoute, ...] = get_args(ResumableRoute)

_TRUE = frozenset(("true", "1", "yes", "on"))
_FALSE = frozenset(("false", "0", "no", "off"))


def parse_asked(value: str | None) -> bool | None:
    """The request's word in its `x-shardgate-resumable` header (None: it says nothing)."""
    if value is None:
        return None
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise InvalidRequest(
        f"{RESUMABLE_HEADER} must be true or false, got {value[:32]!r}", RESUMABLE_HEADER
    )


def kept(asked: bool | None, tenant: bool | None, route: str, routes: Collection[str]) -> bool:
    """The request's word, else its tenant's, else whether its route is listed."""
    if asked is not None:
        return asked
    if tenant is not None:
        return tenant
    return route in routes
