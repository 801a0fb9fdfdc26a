"""A typed face for a Hugging Face style tokenizer (the engine's own, or one loaded from disk)."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from shardgate.v1.params import Message as ChatMessage
from shardgate.v1.params import Template

from engine_sidecar.backends.common.template import (
    TemplateRefused,
    template_error_reason,
    template_kwargs,
)

# Tools as a chat template takes them (a JSON schema each; HF's `tools=`).
TemplateTools = list[dict[str, Any]]


def _arguments(text: str) -> dict[str, Any]:
    """A call's arguments as chat templates take them: an object (vLLM's coercion: text that
    is no JSON object is an empty one)."""
    try:
        value = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def conversation(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The messages as a chat template takes them (as vLLM renders them)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        d: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            d["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": _arguments(c.arguments)},
                }
                for c in m.tool_calls
            ]
        if m.tool_call_id is not None:
            d["tool_call_id"] = m.tool_call_id
        out.append(d)
    return out


class HfTokenizer:
    """Wraps any object with HF's `encode`, `decode` and `apply_chat_template`."""

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer
        self.vocab_size: int = len(tokenizer)
        eos = getattr(tokenizer, "eos_token_id", None)
        self.eos_token_id: int | None = eos if isinstance(eos, int) else None
        self._skip_special = True

    def keeping_special_tokens(self) -> HfTokenizer:
        """This tokenizer, its decode keeping special tokens' text (vLLM's
        skip_special_tokens false)."""
        out = copy.copy(self)
        out._skip_special = False
        return out

    @property
    def truncation_side(self) -> str:
        """The side the tokenizer truncates from by default ("right": it keeps the first)."""
        return str(getattr(self._tok, "truncation_side", "right"))

    @property
    def raw(self) -> Any:
        """The wrapped tokenizer itself (what vLLM's parsers take)."""
        return self._tok

    @classmethod
    def from_pretrained(cls, path: str) -> HfTokenizer:
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(path))

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=self._skip_special))

    def chat_text(
        self,
        messages: Sequence[ChatMessage],
        tools: TemplateTools | None = None,
        template: Template | None = None,
    ) -> str:
        """The conversation rendered by the model's chat template (or the request's), with the
        request's controls as vLLM's server applies them. Raises TemplateRefused where the
        template refuses the request."""
        kwargs = template_kwargs(tools, template)
        try:
            text = self._tok.apply_chat_template(conversation(messages), **kwargs)
        except Exception as e:  # (a template raises what it likes on input it refuses)
            raise TemplateRefused(template_error_reason(e)) from e
        return str(text)

    def encode_chat(
        self,
        messages: Sequence[ChatMessage],
        tools: TemplateTools | None = None,
        template: Template | None = None,
        add_special_tokens: bool = False,
    ) -> list[int]:
        # The template writes any special tokens itself (vLLM's chat path does the same).
        text = self.chat_text(messages, tools, template)
        return self.encode(text, add_special_tokens=add_special_tokens)
