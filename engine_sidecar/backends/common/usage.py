"""Usage bookkeeping of one request: turns an engine's per-step output into EngineDeltas.

The first delta of a run carries prompt_tokens and cached_tokens; the last carries the finish,
prompt_tokens, cached_tokens again and completion_tokens, counting resumed tokens too, so a
resumed request reports usage as if it had never been interrupted.
"""

from __future__ import annotations

from shardgate.v1.params import Logprobs

from engine_sidecar.backend import EngineDelta, ErrorCode, Finish


class Usage:
    __slots__ = ("cached", "completion", "key", "prompt_tokens", "sent_first")

    def __init__(self, key: int, prompt_tokens: int, resumed: int) -> None:
        self.key = key
        self.prompt_tokens = prompt_tokens
        self.completion = resumed
        self.cached = 0
        self.sent_first = False

    def delta(
        self,
        token_ids: list[int],
        text: str,
        finish: Finish = Finish.NONE,
        *,
        cached_tokens: int = 0,
        completion_tokens: int | None = None,
        logprobs: list[Logprobs] | None = None,
    ) -> EngineDelta:
        """The delta for new tokens; `completion_tokens` overrides the count when the engine
        reports it (a text-only engine)."""
        self.completion += len(token_ids)
        d = EngineDelta(self.key, token_ids, text, finish)
        if logprobs is not None:
            d.logprobs = logprobs
        if not self.sent_first:
            self.sent_first = True
            d.prompt_tokens = self.prompt_tokens
            self.cached = min(cached_tokens, self.prompt_tokens)
        if finish:
            if completion_tokens is not None:
                self.completion = completion_tokens
            d.prompt_tokens = self.prompt_tokens
            d.completion_tokens = self.completion
        if d.prompt_tokens:
            d.cached_tokens = self.cached
        return d

    def error(self, code: ErrorCode, message: str, field: str = "") -> EngineDelta:
        d = self.delta([], "", Finish.ERROR)
        d.error_code, d.error_message, d.error_field = code, message, field
        return d
