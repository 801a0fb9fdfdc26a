"""A typed face for a Hugging Face style tokenizer (the engine's own, or one loaded from disk)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shardgate.v1.params import Message as ChatMessage


class HfTokenizer:
    """Wraps any object with HF's `encode`, `decode` and `apply_chat_template`."""

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer
        self.vocab_size: int = len(tokenizer)
        eos = getattr(tokenizer, "eos_token_id", None)
        self.eos_token_id: int | None = eos if isinstance(eos, int) else None

    @property
    def inner(self) -> Any:
        """The wrapped tokenizer (an engine's own functions take it)."""
        return self._tok

    @classmethod
    def from_pretrained(cls, path: str) -> HfTokenizer:
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(path))

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=True))

    def chat_text(self, messages: Sequence[ChatMessage]) -> str:
        """The conversation rendered by the model's chat template, ready for generation."""
        conversation = [{"role": m.role, "content": m.content} for m in messages]
        text = self._tok.apply_chat_template(
            conversation, tokenize=False, add_generation_prompt=True
        )
        return str(text)

    def encode_chat(self, messages: Sequence[ChatMessage]) -> list[int]:
        # The template writes any special tokens itself (vLLM's chat path does the same).
        return self.encode(self.chat_text(messages), add_special_tokens=False)
