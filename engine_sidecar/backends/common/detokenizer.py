"""Incremental detokenisation for engines that stream token ids only.

Decoding token by token breaks words that span tokens (byte-level BPE, multi-byte characters).
Like vLLM's detokenizer, this decodes a short window that ends at the new tokens and emits the
text beyond what the window's older part decoded to, holding back an incomplete character.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine_sidecar.backends.common.tokenizer import HfTokenizer

_CONTEXT = 5  # prompt tokens kept as context for the first generated token
_INCOMPLETE = "\ufffd"


class IncrementalDetokenizer:
    __slots__ = ("_ids", "_prefix", "_read", "_tok")

    def __init__(self, tokenizer: HfTokenizer, context_ids: Sequence[int]) -> None:
        self._tok = tokenizer
        self._ids = list(context_ids[-_CONTEXT:])
        self._prefix = 0
        self._read = len(self._ids)

    def add(self, token_ids: Sequence[int]) -> str:
        """The text that the new tokens complete (may be empty while a character is partial)."""
        if not token_ids:
            return ""
        ids = self._ids
        ids.extend(token_ids)
        before = self._tok.decode(ids[self._prefix : self._read])
        after = self._tok.decode(ids[self._prefix :])
        if len(after) <= len(before) or after.endswith(_INCOMPLETE):
            return ""
        self._prefix, self._read = self._read, len(ids)
        if self._prefix > 64:  # keep the window short
            drop = self._prefix
            del ids[:drop]
            self._prefix -= drop
            self._read -= drop
        return after[len(before) :]
