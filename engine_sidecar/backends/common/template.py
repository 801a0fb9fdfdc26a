"""A chat request's template controls -> `apply_chat_template`'s arguments, as vLLM's server
merges them: the request's chat_template_kwargs over the tools, the named controls over both,
the request's template (if any) last; nothing tokenized by the template itself."""

from __future__ import annotations

import json
from typing import Any, Final

import jinja2
from shardgate.v1.params import Template

# Arguments of apply_chat_template that the request's kwargs do not set (vLLM passes its own).
_RESERVED: Final = frozenset({"tokenize", "return_dict", "chat_template"})


class TemplateRefused(ValueError):
    """The chat template refused the request (its reason is the client's to read)."""


def template_kwargs(tools: list[dict[str, Any]] | None, t: Template | None) -> dict[str, Any]:
    """The keyword arguments of `apply_chat_template(conversation, **kwargs)`."""
    if t is None:
        return {"tools": tools, "add_generation_prompt": True, "tokenize": False}
    named: dict[str, Any] = json.loads(t.kwargs) if t.kwargs else {}
    named["add_generation_prompt"] = t.add_generation_prompt
    named["continue_final_message"] = t.continue_final_message
    if t.documents:
        named["documents"] = json.loads(t.documents)
    # (vLLM drops the values that mean "unset" when it merges them over its own)
    out: dict[str, Any] = {"tools": tools}
    out.update({k: v for k, v in named.items() if v is not None and v != "auto"})
    for key in _RESERVED:
        out.pop(key, None)
    template = t.chat_template if t.chat_template is not None else named.get("chat_template")
    if template is not None:
        out["chat_template"] = template
    out["tokenize"] = False
    return out


def template_error_reason(e: BaseException) -> str:
    """The most specific reason in a template error's chain (as vLLM reports it)."""
    seen: set[int] = set()
    current: BaseException | None = e
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, jinja2.TemplateError):
            return str(current)
        current = current.__cause__ or current.__context__
    return str(e)


def asks_template(t: Template | None) -> bool:
    """Whether the request brings its own template (which the sidecar must be told to trust)."""
    if t is None:
        return False
    if t.chat_template is not None:
        return True
    return bool(t.kwargs) and json.loads(t.kwargs).get("chat_template") is not None
