"""The lean path's two routes: the same OpenAI handler as aiohttp's routes
(gateway/api/http.py), its answers and errors written as aiohttp's middleware writes them."""

from __future__ import annotations

import logging

from gateway.api.lean.exchange import LeanExchange
from gateway.api.openai import protocol
from gateway.api.openai.exchange import Reply
from gateway.api.openai.serving import OpenAIServing
from gateway.api.replies import request_id
from gateway.types import GatewayError

__all__ = ["LeanRoutes"]

log = logging.getLogger(__name__)


class LeanRoutes:
    __slots__ = ("_serving",)

    def __init__(self, serving: OpenAIServing) -> None:
        self._serving = serving

    async def __call__(self, ex: LeanExchange) -> None:
        head = ex.head
        rid = request_id(head.headers.get("x-request-id"))
        decode = protocol.decode_chat if head.kind == "chat" else protocol.decode_completion
        try:
            answer = await self._serving.generate(ex, rid, decode, head.kind)
        except GatewayError as e:
            ex.error(e, rid)
            return
        except ConnectionResetError:
            ex.abandon()  # the client left while its answer was written
            return
        except Exception:
            log.exception("request %s failed", rid)
            ex.error(GatewayError("Internal error."), rid)
            return
        if isinstance(answer, Reply):
            ex.reply(answer, rid)
        elif not ex.ended():
            ex.abandon()  # (a stream that went on without its client)
