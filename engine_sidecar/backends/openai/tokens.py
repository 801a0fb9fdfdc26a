"""The server's /tokenize and /detokenize (vLLM's): a prompt's ids as a generation gets them
(the server's chat template applied, with the request's tools), and the text of ids."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from engine_sidecar.backend import EngineRequest, ErrorCode, RequestError
from engine_sidecar.backends.openai.body import message, template_fields
from engine_sidecar.backends.openai.client import EngineClient, ServerRefused
from engine_sidecar.backends.openai.errors import status_code


def tokenize_body(model: str, r: EngineRequest) -> dict[str, Any]:
    body: dict[str, Any] = {"model": r.lora or model}
    if r.messages is not None:
        body["messages"] = [message(m) for m in r.messages]  # (as the chat request's)
        t = r.generation.tools
        if t is not None:
            body["tools"] = json.loads(t.tools)
    else:
        body["prompt"] = r.prompt or ""
    body.update(template_fields(r.generation))
    return body


async def prompt_ids(client: EngineClient, model: str, r: EngineRequest) -> list[int]:
    """The request's prompt ids; raises ServerRefused, aiohttp.ClientError, TimeoutError."""
    if r.prompt_token_ids is not None:
        return list(r.prompt_token_ids)
    answer = await client.post("/tokenize", tokenize_body(model, r))
    return [int(t) for t in answer["tokens"]]


def refused(e: ServerRefused, field: str) -> RequestError:
    return RequestError(status_code(e.status), e.message, e.param or field)


async def detokenize(client: EngineClient, model: str, ids: list[int]) -> str:
    try:
        answer = await client.post("/detokenize", {"model": model, "tokens": ids})
    except ServerRefused as e:
        raise refused(e, "tokens") from None
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        raise RequestError(ErrorCode.UNAVAILABLE, f"the engine server: {e}") from None
    return str(answer["prompt"])
