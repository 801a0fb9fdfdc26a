"""Triton's vLLM backend: `text_input` + `sampling_parameters` JSON -> streamed `text_output`.

Text in, text out. With a tokenizer, chat messages and token ids are rendered to text, lengths are
checked here, and each text delta is tokenised again so that the gateway can resume a request
from its text (a resumed request continues from prompt + the text so far: not bit-exact, as the
engine may split that text into other tokens; resumed ids that end inside a character continue
from the text before it, which is what the client has).
"""

from __future__ import annotations

import json
from typing import Any

from shardgate.v1.params import OPTIONAL, asked

from engine_sidecar.backend import EngineRequest, ErrorCode, RequestError
from engine_sidecar.backends.common.detokenizer import whole_text
from engine_sidecar.backends.common.prompts import Limits, check_request, too_long
from engine_sidecar.backends.common.tokenizer import HfTokenizer
from engine_sidecar.backends.triton import tensors
from engine_sidecar.backends.triton.job import Job, Step, refuse_unannounced

_BAD = ErrorCode.INVALID_ARGUMENT

# The optional sampling fields passed through: Triton's vLLM backend takes vLLM's
# SamplingParams as they are, but answers text only (no per-token or prompt logprobs), and
# structured outputs' parameters do not travel as plain JSON values. A prompt's truncation is
# vLLM's tokenization's, not a sampling parameter: Triton's vLLM backend does not take it.
CAPABILITIES = frozenset(OPTIONAL) - {
    "structured",
    "logprobs",
    "prompt_logprobs",
    "logprob_token_ids",
    "truncate_prompt_tokens",
    "truncation_side",
}


class VllmConvention:
    name = "vllm"

    def __init__(
        self, limits: Limits, tokenizer: HfTokenizer | None, *, additional_outputs: bool = True
    ) -> None:
        self._limits = limits
        self._tok = tokenizer
        self._extra = additional_outputs

    def _need_tokenizer(self, what: str, field: str) -> HfTokenizer:
        if self._tok is None:
            raise RequestError(_BAD, f"{what} needs triton.tokenizer in the sidecar config", field)
        return self._tok

    def prepare(self, request: EngineRequest) -> Job:
        r = request
        check_request(r, self._limits)
        refuse_unannounced(r.sampling, CAPABILITIES, self.name)
        if r.messages is not None:
            field = what = "messages"
            text = self._need_tokenizer("chat", field).chat_text(r.messages) if r.messages else ""
        elif r.prompt is not None:
            field = what = "prompt"
            text = r.prompt
        else:
            field, what = "prompt", "prompt"
            text = self._need_tokenizer("prompt_token_ids", field).decode(r.prompt_token_ids or ())
        if not text:
            raise RequestError(_BAD, f"the {what} must not be empty", field)
        max_tokens = r.sampling.max_tokens
        resume = r.resume_token_ids
        if len(resume) > max_tokens:
            raise RequestError(
                _BAD, "resume_token_ids must be at most max_tokens ids", "resume_token_ids"
            )
        prompt_tokens = 0
        if self._tok is not None:
            prompt_tokens = len(self._tok.encode(text))
            max_len = self._limits.max_model_len
            if prompt_tokens > max_len:
                raise RequestError(_BAD, too_long(max_len, prompt_tokens, max_tokens, what), field)
            if prompt_tokens + max_tokens > max_len:
                raise RequestError(
                    _BAD, too_long(max_len, prompt_tokens, max_tokens, what), "max_tokens"
                )
        if resume:
            # The text so far, as streamed: the bytes of a character that the cut splits never
            # reached the client, and are no text to continue from.
            text += whole_text(self._need_tokenizer("resume", "resume_token_ids"), resume)
        left = max_tokens - len(resume)
        inputs = [
            tensors.text("text_input", text),
            tensors.flag("stream", True),
            tensors.text("sampling_parameters", json.dumps(self._sampling(r, left))),
            tensors.flag("exclude_input_in_output", True),
        ]
        if self._extra:
            extra = ("return_num_input_tokens", "return_num_output_tokens", "return_finish_reason")
            inputs.extend(tensors.flag(name, True) for name in extra)
        return Job(r, inputs, left, len(resume), prompt_tokens)

    @staticmethod
    def _sampling(r: EngineRequest, max_tokens: int) -> dict[str, Any]:
        s = r.sampling
        params: dict[str, Any] = {
            "max_tokens": max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "ignore_eos": s.ignore_eos,
        }
        if s.top_k > 0:
            params["top_k"] = s.top_k
        if s.seed is not None:
            params["seed"] = s.seed
        if s.stop:
            params["stop"] = list(s.stop)
        for name in asked(s):  # Triton's vLLM backend takes vLLM's SamplingParams as they are
            value = getattr(s, name)
            params[name] = (
                {str(k): v for k, v in value.items()} if isinstance(value, dict) else value
            )
        if s.min_tokens:  # what an earlier run generated counts, as max_tokens' does
            params["min_tokens"] = max(0, s.min_tokens - (s.max_tokens - max_tokens))
        if r.lora:
            params["lora_name"] = r.lora
        return params

    def reader(self, job: Job) -> _Reader:
        return _Reader(self._tok)


class _Reader:
    def __init__(self, tokenizer: HfTokenizer | None) -> None:
        self._tok = tokenizer

    def read(self, response: Any) -> Step:
        out = tensors.Outputs(response)
        text = out.text("text_output") or ""
        ids = self._tok.encode(text, add_special_tokens=False) if text and self._tok else []
        count = out.int("num_output_tokens")
        return Step(
            token_ids=ids,
            text=text,
            count=len(ids) if count is None else count,
            finish_reason=out.text("finish_reason") or None,
            prompt_tokens=out.int("num_input_tokens"),
        )
