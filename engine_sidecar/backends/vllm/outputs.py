"""vLLM RequestOutput (DELTA kind) -> EngineDelta."""

from __future__ import annotations

from typing import Any

from engine_sidecar.backend import EngineDelta, Finish
from engine_sidecar.backends.common.usage import Usage
from engine_sidecar.backends.vllm.logprobs import TokenTexts, to_logprobs, to_prompt_logprobs
from engine_sidecar.backends.vllm.text import OwnText

FINISH = {
    "stop": Finish.STOP,
    "length": Finish.LENGTH,
    "abort": Finish.ABORT,
    "error": Finish.ERROR,
}


def to_delta(
    usage: Usage,
    out: Any,
    text: OwnText | None = None,
    logprob_texts: TokenTexts | None = None,
    tokenizer: Any = None,
) -> EngineDelta:
    """One step's output of one request (n=1: a single completion); its text from `text`
    where the sidecar detokenizes this request itself (a stop string may end it there), the
    tokens of its logprobs then from `logprob_texts`; `tokenizer` (the HF one) decodes prompt
    logprobs' tokens, where asked for."""
    c = out.outputs[0]
    finish = FINISH.get(c.finish_reason, Finish.STOP) if out.finished else Finish.NONE
    ids, piece = list(c.token_ids), c.text
    # vLLM's stop_reason: the stop string (or stop token id) that ended it.
    stop = c.stop_reason if out.finished and isinstance(c.stop_reason, str) else ""
    if text is not None:
        ids, piece, stopped = text.add(ids, bool(out.finished))
        if stopped:
            finish, stop = Finish.STOP, text.matched
    logprobs = None
    if c.logprobs is not None:  # (asked for): one per token, the dropped ones' dropped too
        logprobs = to_logprobs(c.logprobs[: len(ids)], logprob_texts)
    cached = out.num_cached_tokens or 0
    d = usage.delta(ids, piece, finish, cached_tokens=cached, logprobs=logprobs)
    d.stop_sequence = stop if finish is Finish.STOP else ""
    if out.prompt_logprobs:  # (asked for: on the first output only)
        d.prompt_logprobs = to_prompt_logprobs(tokenizer, out.prompt_token_ids, out.prompt_logprobs)
    return d
