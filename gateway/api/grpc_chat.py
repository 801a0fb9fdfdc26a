"""A gRPC GenerateRequest's controls of its input (gateway.proto): chat template controls,
special tokens and include_reasoning, with the OpenAI API's checks and errors; and a prompt of
token ids."""

from __future__ import annotations

from typing import Any, Final

import msgspec
from shardgate.v1 import gateway_pb2 as pb

from gateway.api.openai.template import template_of
from gateway.api.openai.validation import INT32_MAX
from gateway.types import GenerationRequest, InvalidRequest

_OBJECT: Final = msgspec.json.Decoder(dict[str, Any])
_DOCUMENTS: Final = msgspec.json.Decoder(list[dict[str, str]])


def prompt_ids(m: pb.GenerateRequest) -> tuple[int, ...]:
    ids = tuple(m.prompt_token_ids.ids)
    if not ids or any(not 0 <= t <= INT32_MAX for t in ids):
        raise InvalidRequest(
            "prompt_token_ids.ids must be a non-empty list of token ids (integers of at least 0)",
            "prompt_token_ids",
        )
    return ids


def _json(decoder: msgspec.json.Decoder[Any], text: str, field: str, what: str) -> Any:
    if not text:
        return None
    try:
        return decoder.decode(text)
    except (msgspec.ValidationError, msgspec.DecodeError):
        raise InvalidRequest(f"{field} must be {what}", field) from None


def apply_controls(m: pb.GenerateRequest, out: GenerationRequest, chat: bool) -> None:
    """The request's input controls on `out` (each only where it asks for something)."""
    if m.HasField("template"):
        if not chat:
            raise InvalidRequest("template applies to chat requests only", "template")
        t = m.template
        out.generation.template = template_of(
            t.chat_template if t.HasField("chat_template") else None,
            _json(_OBJECT, t.kwargs_json, "template.kwargs_json", "a JSON object"),
            t.add_generation_prompt if t.HasField("add_generation_prompt") else None,
            t.continue_final_message if t.HasField("continue_final_message") else None,
            _json(
                _DOCUMENTS,
                t.documents_json,
                "template.documents_json",
                "a JSON array of objects of strings",
            ),
        )
    if m.HasField("add_special_tokens") and m.add_special_tokens == chat:
        out.generation.add_special_tokens = m.add_special_tokens  # (not the input's default)
    if m.HasField("include_reasoning") and not m.include_reasoning:
        if not chat:
            raise InvalidRequest(
                "include_reasoning applies to chat requests only", "include_reasoning"
            )
        if m.HasField("logprobs"):
            raise InvalidRequest(
                "logprobs are not given with include_reasoning false (they would show the "
                "reasoning's tokens)",
                "logprobs",
            )
        out.hide_reasoning = True
