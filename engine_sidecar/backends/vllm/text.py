"""The sidecar's own text for requests that vLLM's detokenizer cannot continue exactly.

vLLM primes a request's detokenizer with its prompt, which for a resumed request is the prompt
and the tokens so far. Two things go wrong there: where those tokens end inside a character,
its first text repeats the whole prompt (the decode stream knows of no text emitted before);
and with stop strings, what the earlier run held back (they could begin a stop string) is
part of the prompt now and never emitted. So such a request runs with vLLM's detokenizer off,
and its text comes from the token ids: an incremental detokenizer primed with the context and
stop strings primed with the text so far, the way vLLM applies them.
"""

from __future__ import annotations

from collections.abc import Sequence

from shardgate.v1.params import Sampling

from engine_sidecar.backends.common.detokenizer import IncrementalDetokenizer
from engine_sidecar.backends.common.stops import StopStrings
from engine_sidecar.backends.common.tokenizer import HfTokenizer


class OwnText:
    __slots__ = ("_count", "_detok", "_min_tokens", "_stops")

    def __init__(
        self,
        tokenizer: HfTokenizer,
        prompt_ids: Sequence[int],
        resume_ids: Sequence[int],
        sampling: Sampling,
        detokenizer: IncrementalDetokenizer | None = None,
    ) -> None:
        stops = sampling.stop
        so_far = IncrementalDetokenizer(tokenizer, prompt_ids).add(resume_ids) if stops else ""
        self._stops = StopStrings(stops, so_far, sampling.include_stop_str_in_output)
        self._detok = detokenizer or IncrementalDetokenizer(tokenizer, [*prompt_ids, *resume_ids])
        self._count = len(resume_ids)
        self._min_tokens = sampling.min_tokens

    @property
    def matched(self) -> str:
        """The stop string that ended the request, once one did."""
        return self._stops.matched

    def add(self, token_ids: Sequence[int], finished: bool) -> tuple[list[int], str, bool]:
        """The tokens to report, their text, and whether a stop string ended the request
        (tokens after the one that completed it are dropped, as vLLM does). As vLLM does, no
        stop string completes within the text of the first min_tokens tokens."""
        kept: list[int] = []
        parts: list[str] = []
        for t in token_ids:
            kept.append(t)
            self._count += 1
            piece = self._detok.add((t,))
            text, stopped = self._stops.feed(piece, self._count > self._min_tokens)
            parts.append(text)
            if stopped:
                return kept, "".join(parts), True
        if finished:
            parts.append(self._stops.flush())
        return kept, "".join(parts), False


def own_text(
    tokenizer: HfTokenizer,
    prompt_ids: Sequence[int],
    resume_ids: Sequence[int],
    sampling: Sampling,
) -> OwnText | None:
    """An OwnText where vLLM's text would be wrong: a resumed request, or a prompt that ends
    inside a character (its first text would repeat the prompt); else None."""
    if not sampling.skip_special_tokens:
        tokenizer = tokenizer.keeping_special_tokens()
    detok = IncrementalDetokenizer(tokenizer, [*prompt_ids, *resume_ids])
    if not resume_ids and not detok.held:
        return None
    return OwnText(tokenizer, prompt_ids, resume_ids, sampling, detok)
