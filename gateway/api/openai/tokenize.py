"""POST /tokenize and /detokenize with vLLM's bodies and answers, served by a replica of the
model (its engine's tokenizer and chat template, the same ids a generation would get)."""

from __future__ import annotations

from typing import Annotated, Any, Final

import msgspec
from aiohttp import web
from shardgate.v1.params import Generation

from gateway.api.body import read_body
from gateway.api.openai.protocol import ChatMessage, message_of
from gateway.api.openai.template import template_of
from gateway.api.openai.validation import EXPECTED, decode_json
from gateway.config.schema import GatewaySettings
from gateway.policy.tenants import bearer_key
from gateway.runtime.fleet import Fleet
from gateway.runtime.service import Service
from gateway.types import InvalidRequest, ModelNotFound, Sampling, Unavailable
from gateway.upstream import tokens

_TokenId = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
TIMEOUT_S = 10.0


class TokenizeBody(msgspec.Struct, kw_only=True):
    model: Annotated[str, msgspec.Meta(min_length=1)]
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool | None = None
    add_generation_prompt: bool | None = None
    continue_final_message: bool | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_strs: bool | None = None


class DetokenizeBody(msgspec.Struct, kw_only=True):
    model: Annotated[str, msgspec.Meta(min_length=1)]
    tokens: list[_TokenId]


_TOKENIZE: Final = msgspec.json.Decoder(TokenizeBody)
_DETOKENIZE: Final = msgspec.json.Decoder(DetokenizeBody)
_EXPECTED: Final = {
    **EXPECTED,
    "tokens": "must be an array of token ids (integers of at least 0)",
    "prompt": "must be a string",
}


class Tokenizing:
    def __init__(self, fleet: Fleet, service: Service, settings: GatewaySettings) -> None:
        self._fleet = fleet
        self._service = service
        self.settings = settings

    def _replica(self, request: web.Request, model: str) -> tuple[str, str, str]:
        return self.replica(bearer_key(request.headers.get("Authorization")), model)

    def replica(self, api_key: str | None, model: str) -> tuple[str, str, str]:
        """(model, lora, the address of a routable replica's head) for `model`, asked for with
        `api_key` (a 401 when it is not a tenant's)."""
        self._service.tenants.resolve(api_key)
        model, lora = self._fleet.adapter_of(model)
        if not self._fleet.knows(model):
            raise ModelNotFound(f"The model `{model}` does not exist.", "model")
        live = [r for r in self._fleet.pool(model) if r.routable]
        if not live:
            raise Unavailable(f"No healthy replica serves `{model}` right now.")
        return model, lora, min(live, key=lambda r: r.inflight).address

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await read_body(
            request, self.settings.max_body_bytes, self.settings.client_body_timeout_s
        )
        req = decode_json(_TOKENIZE, body, _EXPECTED)
        if (req.prompt is None) == (req.messages is None):
            raise InvalidRequest("Exactly one of 'prompt' and 'messages' must be given.", "prompt")
        if req.return_token_strs:
            raise InvalidRequest("return_token_strs is not supported.", "return_token_strs")
        chat = req.messages is not None
        # (a prompt's body takes no template controls: vLLM ignores them there)
        template = (
            template_of(
                req.chat_template,
                req.chat_template_kwargs,
                req.add_generation_prompt,
                req.continue_final_message,
            )
            if chat
            else None
        )
        # vLLM's defaults: special tokens for a prompt, none for messages (the template's).
        add = req.add_special_tokens
        model, lora, address = self._replica(request, req.model)
        messages = (
            tuple(message_of(i, m) for i, m in enumerate(req.messages))
            if req.messages is not None
            else None
        )
        generation = Generation(
            request_id="tokenize",
            model=model,
            sampling=Sampling(max_tokens=1),
            prompt=req.prompt,
            messages=messages,
            lora=lora,
            template=template,
            add_special_tokens=None if add is None or add == (not chat) else add,
        )
        tls = self.settings.link.tls
        ids, max_len = await tokens.tokenize(address, generation, TIMEOUT_S, tls)
        return web.json_response(
            {"count": len(ids), "max_model_len": max_len, "tokens": ids, "token_strs": None}
        )

    async def detokenize(self, request: web.Request) -> web.Response:
        body = await read_body(
            request, self.settings.max_body_bytes, self.settings.client_body_timeout_s
        )
        req = decode_json(_DETOKENIZE, body, _EXPECTED)
        model, _, address = self._replica(request, req.model)
        tls = self.settings.link.tls
        text = await tokens.detokenize(address, model, req.tokens, TIMEOUT_S, tls)
        return web.json_response({"prompt": text})
