"""Incremental detokenisation for engines that stream token ids only.

Decoding token by token breaks words that span tokens (byte-level BPE, multi-byte characters).
Like vLLM's detokenizer, this decodes a short window that ends at the new tokens and emits the
text beyond what the window's older part decoded to, holding back the tokens of a character that
is not complete yet (the text ends with U+FFFD while they are decoded).

What has been emitted is thus a function of the token ids so far: the text up to the last token
whose text ends on a whole character. A detokenizer primed with a context (the prompt, or the
prompt and the tokens an earlier run generated) knows which of its tokens were held back, and
emits their text with the next tokens: a request resumed at a cut inside a character continues
with exactly the text an uninterrupted run would have emitted.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine_sidecar.backends.common.tokenizer import HfTokenizer

_CONTEXT = 5  # tokens kept before the held-back ones, as the decoding window's context
_PRIMED = 64  # context tokens kept at most: a longer held-back run than this is not expected
_INCOMPLETE = "\ufffd"


def _whole(tok: HfTokenizer, ids: Sequence[int], lo: int, hi: int) -> int:
    """The largest k in (lo, hi] whose text ids[:k] ends on a whole character, else lo.

    A short window suffices: whether a text ends inside a character depends on its last tokens.
    """
    for k in range(hi, lo, -1):
        if not tok.decode(ids[max(k - _CONTEXT, 0) : k]).endswith(_INCOMPLETE):
            return k
    return lo


def whole_text(tokenizer: HfTokenizer, token_ids: Sequence[int]) -> str:
    """The text of `token_ids` that a detokenizer has emitted: without the tokens of a last,
    incomplete character (those come out with the tokens that complete it)."""
    end = _whole(tokenizer, token_ids, max(len(token_ids) - _PRIMED, 0), len(token_ids))
    return tokenizer.decode(token_ids[:end])


class IncrementalDetokenizer:
    __slots__ = ("_ids", "_prefix", "_read", "_tok")

    def __init__(self, tokenizer: HfTokenizer, context_ids: Sequence[int]) -> None:
        """`context_ids`: the tokens the engine continues from (prompt + resumed tokens)."""
        self._tok = tokenizer
        self._ids = ids = list(context_ids[-_PRIMED:])
        # ids[:read] has been emitted (or is the prompt); ids[read:] is held back.
        self._read = _whole(tokenizer, ids, 0, len(ids))
        self._prefix = max(self._read - _CONTEXT, 0)

    @property
    def held(self) -> int:
        """Tokens whose text waits for the rest of a character."""
        return len(self._ids) - self._read

    def add(self, token_ids: Sequence[int]) -> str:
        """The text that the new tokens complete (may be empty while a character is partial)."""
        if not token_ids:
            return ""
        ids = self._ids
        ids.extend(token_ids)
        end = len(ids)
        after = self._tok.decode(ids[self._prefix :])
        if after.endswith(_INCOMPLETE):
            # Several tokens at once: those before an incomplete last character are whole.
            end = _whole(self._tok, ids, self._read, end - 1)
            if end == self._read:
                return ""
            after = self._tok.decode(ids[self._prefix : end])
        before = self._tok.decode(ids[self._prefix : self._read])
        if len(after) <= len(before):
            return ""
        self._prefix, self._read = self._read, end
        if self._prefix > 64:  # keep the window short
            drop = self._prefix
            del ids[:drop]
            self._prefix -= drop
            self._read -= drop
        return after[len(before) :]
