"""A chat request's template controls (vLLM's chat_template, chat_template_kwargs,
add_generation_prompt, continue_final_message, documents) -> the one definition's `Template`,
with vLLM's checks; the sidecar renders them (engine_sidecar/backends/common/template.py)."""

from __future__ import annotations

from typing import Any, Final

import msgspec
from shardgate.v1.params import Generation, Template

from gateway.types import InvalidRequest

_ENCODE: Final = msgspec.json.Encoder()
_NONE: Final = Template()


def template_of(
    chat_template: str | None,
    kwargs: dict[str, Any] | None,
    add_generation_prompt: bool | None,
    continue_final_message: bool | None,
    documents: list[dict[str, str]] | None = None,
) -> Template | None:
    """The controls a request asks for (None: none, the model's template as it is)."""
    if continue_final_message and add_generation_prompt:
        raise InvalidRequest(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
            "continue_final_message",
        )
    t = Template(
        chat_template=chat_template,
        kwargs=_ENCODE.encode(kwargs).decode() if kwargs else "",
        add_generation_prompt=add_generation_prompt is not False,
        continue_final_message=bool(continue_final_message),
        documents=_ENCODE.encode(documents).decode() if documents is not None else "",
    )
    return None if t == _NONE else t


def response_role(g: Generation) -> str:
    """The role of the answer's message: the assistant's, or, without a generation prompt,
    that of the message it continues (as vLLM answers)."""
    t = g.template
    if t is None or t.add_generation_prompt or not g.messages:
        return "assistant"
    return g.messages[-1].role
