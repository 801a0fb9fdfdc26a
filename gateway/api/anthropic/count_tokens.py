"""POST /v1/messages/count_tokens: the input tokens of a Messages request, counted by a
replica of the model (its engine's tokenizer and chat template, tools rendered: the count a
generation of the same messages reports as its `input_tokens`)."""

from __future__ import annotations

from aiohttp import web
from shardgate.v1.params import Generation

from gateway.api.anthropic.protocol import decode_count_tokens
from gateway.api.anthropic.serving import api_key
from gateway.api.body import read_body
from gateway.api.openai.tokenize import TIMEOUT_S, Tokenizing
from gateway.types import Sampling
from gateway.upstream import tokens

__all__ = ["CountTokens"]


class CountTokens:
    def __init__(self, tokenizing: Tokenizing) -> None:
        self._tokenizing = tokenizing

    async def count_tokens(self, request: web.Request) -> web.Response:
        s = self._tokenizing.settings
        body = await read_body(request, s.max_body_bytes, s.client_body_timeout_s)
        model, messages, tools = decode_count_tokens(body)
        model, lora, address = self._tokenizing.replica(api_key(request.headers), model)
        generation = Generation(
            request_id="count_tokens",
            model=model,
            sampling=Sampling(max_tokens=1),
            messages=messages,
            lora=lora,
            tools=tools,
        )
        ids, _ = await tokens.tokenize(address, generation, TIMEOUT_S, s.link.tls)
        return web.json_response({"input_tokens": len(ids)})
