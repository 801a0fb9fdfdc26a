"""vLLM's `echo` and `prompt_logprobs` in its answers.

Echo: a text completion starts with its prompt (a prompt of token ids, with their text); a
chat answer with the conversation's last
message, where that message has the answer's role (an assistant's message it continues).

Prompt logprobs come from the engine with the first delta, one `Logprobs` per prompt token (the
first has none: the model gives none for it). A whole answer carries them as vLLM does: chat's
beside its `choices`, a text completion's in its choice, each token's entries keyed by token id
with their logprob, rank and decoded token (-inf as -9999.0). With echo and logprobs, a text
completion's `logprobs` begin with the prompt's tokens (logprobs.py renders them).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from gateway.api.openai.template import response_role
from gateway.api.openai.tokenize import TIMEOUT_S, Tokenizing
from gateway.types import GenerationRequest, Logprobs
from gateway.upstream import tokens

_encode: Final = msgspec.json.Encoder().encode
_json: Final = msgspec.json.Decoder()
_FLOOR: Final = -9999.0


def echo_text(req: GenerationRequest) -> str:
    """What the answer starts with ("": nothing)."""
    if not req.echo:
        return ""
    g = req.generation
    if not g.messages:
        return req.prompt if req.prompt is not None else req.echo_prompt
    last = g.messages[-1]
    return last.content if last.role == response_role(g) else ""


async def fetch_prompt_text(
    tokenizing: Tokenizing, req: GenerationRequest, api_key: str | None
) -> None:
    """Echo of a prompt of token ids: their text, as vLLM decodes the prompt it echoes (its
    special tokens kept), from a replica of the model (its Detokenize call)."""
    if not req.echo or req.prompt_token_ids is None:
        return
    model, _, address = tokenizing.replica(api_key, req.model)
    ids = list(req.prompt_token_ids)
    tls = tokenizing.settings.link.tls
    req.echo_prompt = await tokens.detokenize(address, model, ids, TIMEOUT_S, tls)


def render(lps: list[Logprobs]) -> list[dict[str, dict[str, Any]] | None]:
    out: list[dict[str, dict[str, Any]] | None] = []
    for lp in lps:
        if not lp.logprobs:
            out.append(None)
            continue
        out.append(
            {
                str(lp.ids[i]): {
                    "logprob": _FLOOR if lp.logprobs[i] == float("-inf") else lp.logprobs[i],
                    "rank": lp.ranks[i] if i < len(lp.ranks) else None,
                    "decoded_token": lp.tokens[i],
                }
                for i in range(len(lp.ids))
            }
        )
    return out


def body_with(body: bytes, chat: bool, lps: list[Logprobs]) -> bytes:
    """A whole answer's body (one choice) with its prompt's logprobs."""
    answer: dict[str, Any] = _json.decode(body)
    rendered = render(lps)
    if chat:
        answer["prompt_logprobs"] = rendered
    else:
        answer["choices"][0]["prompt_logprobs"] = rendered
    return _encode(answer)
