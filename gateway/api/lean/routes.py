"""The lean path's two routes: the same OpenAI handler as aiohttp's routes
(gateway/api/http.py), its answers and errors written as aiohttp's middleware writes them."""

from __future__ import annotations

import logging
from collections.abc import Callable

from gateway.api.edge import Edge
from gateway.api.forward import WORKER_HEADER
from gateway.api.lean.exchange import LeanExchange
from gateway.api.lean.front import LeanFront
from gateway.api.lean.head import HeadLimits
from gateway.api.openai import protocol
from gateway.api.openai.exchange import Reply
from gateway.api.openai.serving import OpenAIServing
from gateway.config.schema import GatewaySettings
from gateway.types import GatewayError

__all__ = ["LeanRoutes", "lean_front"]

log = logging.getLogger(__name__)


class LeanRoutes:
    __slots__ = ("_extra", "_serving")

    def __init__(self, serving: OpenAIServing, extra: dict[str, str] | None = None) -> None:
        """`extra`: headers of every answer (aiohttp's path adds them as its responses start)."""
        self._serving = serving
        self._extra = extra or {}

    async def __call__(self, ex: LeanExchange) -> None:
        head = ex.head
        if self._extra:
            ex.extra = self._extra
        rid = ex.rid
        decode = protocol.decode_chat if head.kind == "chat" else protocol.decode_completion
        try:
            answer = await self._serving.generate(ex, rid, decode, head.kind)
        except GatewayError as e:
            ex.error(e)
            return
        except ConnectionResetError:
            ex.abandon()  # the client left while its answer was written
            return
        except Exception:
            log.exception("request %s failed", rid)
            ex.error(GatewayError("Internal error."))
            return
        if isinstance(answer, Reply):
            ex.reply(answer)
        elif not ex.ended():
            ex.abandon()  # (a stream that went on without its client)


def lean_front(
    s: GatewaySettings,
    tls: bool,
    edge: Edge,
    serving: OpenAIServing,
    settings: Callable[[], GatewaySettings],
    worker: int | None,
) -> LeanFront | None:
    """The lean path of a gateway with settings `s` (`settings`: its current ones); none when
    it is off or the edge speaks TLS (aiohttp serves all). `worker`: its index under
    --workers N (its answers then name it, as aiohttp's do)."""
    if not s.lean_http or tls:
        return None
    limits = HeadLimits(
        s.max_request_line_bytes, s.max_header_field_bytes, s.max_headers, s.max_body_bytes
    )
    extra = {WORKER_HEADER: str(worker)} if worker is not None else None
    return LeanFront(edge, limits, s.keepalive_timeout_s, LeanRoutes(serving, extra), settings)
