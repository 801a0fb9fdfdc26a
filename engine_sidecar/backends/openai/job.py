"""What the backend makes of one request before it streams: checks, lengths and budget.

With a tokenizer, a request is checked as the in-process engines check it (the prompt's length
against max_model_len, token ids against the vocabulary), so a bad one is refused at submit with
the field at fault; without one, the server refuses what it cannot take, in the stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine_sidecar.backend import EngineRequest, ErrorCode, RequestError
from engine_sidecar.backends.common.prompts import Limits, check_request, prepare
from engine_sidecar.backends.common.tokenizer import HfTokenizer

if TYPE_CHECKING:
    from engine_sidecar.backends.vllm.tools import ChatParse

_BAD = ErrorCode.INVALID_ARGUMENT


@dataclass(frozen=True, slots=True)
class Job:
    request: EngineRequest
    max_tokens: int  # tokens left to generate
    resumed: int  # tokens an earlier run generated
    prompt_tokens: int  # the prompt's length where known here (else 0: the server says)
    chat: ChatParse | None = None  # its answer parsed on the sidecar (local.py)

    @property
    def as_ids(self) -> bool:
        """It runs on the server as token ids (/v1/completions): a resumed request, one whose
        answer the sidecar parses or whose tools its template renders (the server's /tokenize
        renders them), one with logprobs (their entries are exact there)."""
        r = self.request
        return (
            bool(self.resumed)
            or self.chat is not None
            or r.generation.tools is not None
            or r.sampling.logprobs is not None
        )


def make_job(
    r: EngineRequest,
    limits: Limits,
    tokenizer: HfTokenizer | None,
    chat: ChatParse | None = None,
) -> Job:
    if tokenizer is not None:
        tools = None
        if r.generation.tools is not None:  # (only with vLLM here: local.py)
            from engine_sidecar.backends.vllm.tools import template_tools

            tools = template_tools(r.generation, chat)
        p = prepare(r, limits, tokenizer, tools)
        return Job(r, p.max_tokens, p.resumed, len(p.prompt_ids), chat)
    check_request(r, limits)
    if r.messages is not None and not r.messages:
        raise RequestError(_BAD, "the messages must not be empty", "messages")
    if (r.prompt is not None and not r.prompt) or r.prompt_token_ids == ():
        raise RequestError(_BAD, "the prompt must not be empty", "prompt")
    resumed = len(r.resume_token_ids)
    if resumed > r.sampling.max_tokens:
        raise RequestError(
            _BAD, "resume_token_ids must be at most max_tokens ids", "resume_token_ids"
        )
    return Job(r, r.sampling.max_tokens - resumed, resumed, len(r.prompt_token_ids or ()))
