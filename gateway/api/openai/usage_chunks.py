"""vLLM's `stream_options.continuous_usage_stats` (with include_usage): every chunk of a stream
carries the usage so far (the prompt's tokens, and the completion tokens of the chunk's choice
up to it). A slow path for the streams that ask (they take no direct writes)."""

from __future__ import annotations

from typing import Final

from gateway.types import Delta

_CHUNK_END: Final = b"}\n\n"


class ChoiceUsage:
    """The usage so far of one streamed choice."""

    __slots__ = ("completion", "prompt")

    def __init__(self) -> None:
        self.prompt = 0
        self.completion = 0

    def see(self, d: Delta) -> None:
        """Count a delta (before its chunk gets the usage)."""
        if d.prompt_tokens:
            self.prompt = d.prompt_tokens
        self.completion += len(d.token_ids)

    def see_prompt(self, batch: list[Delta]) -> None:
        """The prompt's tokens, from the first delta of a run, before any chunk is written."""
        for d in batch:
            if d.prompt_tokens:
                self.prompt = d.prompt_tokens
                return

    def add(self, buf: bytearray) -> None:
        """Put the usage so far in the chunk `buf` ends with."""
        assert buf.endswith(_CHUNK_END), "not a chunk"
        p, c = self.prompt, self.completion
        at = len(buf) - len(_CHUNK_END)
        buf[at:at] = b',"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (
            p,
            p + c,
            c,
        )
