"""Request validation and prompt token ids for engines that take token ids.

`prepare` refuses a bad request with a RequestError naming the field at fault (the same checks
and messages as the sim backend), and returns what the engine runs: the prompt, followed by the
resumed tokens, with max_tokens reduced by their number.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from shardgate.v1.params import Message as ChatMessage
from shardgate.v1.params import Template, template_asked

from engine_sidecar.backend import EngineRequest, ErrorCode, RequestError
from engine_sidecar.backends.common.template import TemplateRefused, asks_template

_BAD = ErrorCode.INVALID_ARGUMENT


class PromptTokenizer(Protocol):
    """What `prepare` needs of a tokenizer (an HF tokenizer's wrapper, or the sim's own)."""

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]: ...

    def encode_chat(
        self,
        messages: Sequence[ChatMessage],
        tools: list[dict[str, Any]] | None = None,
        template: Template | None = None,
        add_special_tokens: bool = False,
    ) -> list[int]: ...


class DecodesIds(Protocol):
    @property
    def vocab_size(self) -> int: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@dataclass(frozen=True, slots=True)
class Limits:
    model: str
    max_model_len: int
    loras: frozenset[str] = frozenset()
    # The engine honours chat template controls (Generation.template, add_special_tokens);
    # a request's own template is taken only where trusted (vLLM's trust_request_chat_template).
    templates: bool = False
    trust_request_chat_template: bool = False


@dataclass(frozen=True, slots=True)
class Prepared:
    prompt_ids: list[int]  # the prompt as the client sent it (usage counts these)
    engine_ids: list[int]  # prompt + resumed tokens: what the engine is given
    max_tokens: int  # tokens left to generate
    resumed: int  # tokens an earlier run generated


def too_long(max_len: int, prompt: int, completion: int, what: str) -> str:
    total = prompt + completion
    return (
        f"This model's maximum context length is {max_len} tokens. However, you requested "
        f"{total} tokens ({prompt} in the {what}, {completion} in the completion). "
        f"Please reduce the length of the {what} or completion."
    )


def check_request(r: EngineRequest, limits: Limits) -> None:
    """The checks that need no tokenizer: model, LoRA, input, sampling."""
    if r.model != limits.model:
        raise RequestError(ErrorCode.NOT_FOUND, f"The model `{r.model}` does not exist.", "model")
    if r.lora and r.lora not in limits.loras:
        raise RequestError(
            ErrorCode.NOT_FOUND, f"The LoRA adapter `{r.lora}` does not exist.", "lora"
        )
    if sum(x is not None for x in (r.prompt, r.messages, r.prompt_token_ids)) != 1:
        raise RequestError(
            _BAD, "exactly one of prompt, messages, prompt_token_ids must be set", "prompt"
        )
    _check_template(r, limits)
    s = r.sampling
    if s.max_tokens <= 0:
        raise RequestError(_BAD, f"max_tokens must be at least 1, got {s.max_tokens}", "max_tokens")
    if s.temperature < 0:
        raise RequestError(_BAD, f"temperature must be >= 0, got {s.temperature}", "temperature")
    if not 0.0 < s.top_p <= 1.0:
        raise RequestError(_BAD, f"top_p must be in (0, 1], got {s.top_p}", "top_p")
    if s.top_k < 0:
        raise RequestError(_BAD, f"top_k must be >= 0, got {s.top_k}", "top_k")


UNTRUSTED_TEMPLATE = (
    "Chat template is passed with request, but the sidecar's trust_request_chat_template is "
    "not set. Refused request with untrusted chat template."
)


def _check_template(r: EngineRequest, limits: Limits) -> None:
    g = r.generation
    asked = template_asked(g)
    if not asked:
        return
    if not limits.templates:
        name = asked[0]
        raise RequestError(_BAD, f"{name} is not supported by this engine", name)
    if g.template is not None and g.messages is None:
        raise RequestError(_BAD, "chat template controls need messages", asked[0])
    if asks_template(g.template) and not limits.trust_request_chat_template:
        field = "chat_template" if "chat_template" in asked else "chat_template_kwargs"
        raise RequestError(_BAD, UNTRUSTED_TEMPLATE, field)


def _encode_input(
    r: EngineRequest, tokenizer: PromptTokenizer, tools: list[dict[str, Any]] | None
) -> list[int]:
    """The ids of the prompt's text, or of the messages as the chat template renders them."""
    add = r.generation.add_special_tokens
    if r.messages is not None:
        if not r.messages:
            return []
        try:
            return tokenizer.encode_chat(r.messages, tools, r.generation.template, bool(add))
        except TemplateRefused as e:
            raise RequestError(_BAD, str(e), "messages") from e
    if r.prompt:
        return tokenizer.encode(r.prompt, add_special_tokens=add is not False)
    return []


def _check_ids(ids: Sequence[int], vocab_size: int, what: str, field: str) -> None:
    if any(not 0 <= t < vocab_size for t in ids):
        raise RequestError(_BAD, f"{what} must be in [0, {vocab_size})", field)


def tokenize(
    r: EngineRequest,
    limits: Limits,
    tokenizer: PromptTokenizer,
    tools: list[dict[str, Any]] | None = None,
) -> list[int]:
    """The prompt's token ids as a generation would have them (the chat template applied,
    with `tools`), with no check of its length: what /tokenize answers."""
    check_request(r, limits)
    if r.prompt_token_ids is not None:
        return list(r.prompt_token_ids)
    return _encode_input(r, tokenizer, tools)


def detokenize(model: str, ids: Sequence[int], limits: Limits, tokenizer: DecodesIds) -> str:
    """The text of `ids` (what /detokenize answers)."""
    if model != limits.model:
        raise RequestError(ErrorCode.NOT_FOUND, f"The model `{model}` does not exist.", "model")
    _check_ids(ids, tokenizer.vocab_size, "tokens", "tokens")
    return tokenizer.decode(ids)


def truncated(ids: list[int], keep: int | None, side: str, max_model_len: int) -> list[int]:
    """`ids` cut to `keep` tokens (vLLM's truncate_prompt_tokens): -1 keeps the most the model
    takes less one (a token of room for the output); "left" keeps the last ones, any other side
    the first ones."""
    if keep is None:
        return ids
    if keep < 0:
        keep = max(0, max_model_len - 1)
    if keep >= len(ids):
        return ids
    if keep == 0:
        return []
    return ids[-keep:] if side == "left" else ids[:keep]


def _truncate(ids: list[int], r: EngineRequest, limits: Limits, tokenizer: object) -> list[int]:
    s = r.sampling
    keep = s.truncate_prompt_tokens
    if keep is None:
        return ids
    if keep < -1:
        raise RequestError(
            _BAD,
            f"truncate_prompt_tokens must be -1 or at least 0, got {keep}",
            "truncate_prompt_tokens",
        )
    if keep > limits.max_model_len:
        raise RequestError(
            _BAD,
            f"truncate_prompt_tokens={keep} cannot be greater than max_model_len = "
            f"{limits.max_model_len}. Please request a smaller truncation size.",
            "truncate_prompt_tokens",
        )
    side = s.truncation_side or getattr(tokenizer, "truncation_side", "right")
    return truncated(ids, keep, side, limits.max_model_len)


def prepare(
    r: EngineRequest,
    limits: Limits,
    tokenizer: PromptTokenizer,
    tools: list[dict[str, Any]] | None = None,
) -> Prepared:
    """`tools`: for the chat template (as it takes them)."""
    check_request(r, limits)
    max_tokens = r.sampling.max_tokens
    vocab = tokenizer.vocab_size
    if r.messages is not None:
        field = what = "messages"
        ids = _encode_input(r, tokenizer, tools)
    elif r.prompt is not None:
        field = what = "prompt"
        ids = _encode_input(r, tokenizer, tools)
    else:
        field = what = "prompt"
        ids = list(r.prompt_token_ids or ())
        _check_ids(ids, vocab, "prompt token ids", field)
    ids = _truncate(ids, r, limits, tokenizer)
    if not ids:
        raise RequestError(_BAD, f"the {what} must not be empty", field)
    resume = list(r.resume_token_ids)
    if len(resume) > max_tokens:
        raise RequestError(
            _BAD, "resume_token_ids must be at most max_tokens ids", "resume_token_ids"
        )
    _check_ids(resume, vocab, "resume_token_ids", "resume_token_ids")
    n, max_len = len(ids), limits.max_model_len
    if n > max_len:
        raise RequestError(_BAD, too_long(max_len, n, max_tokens, what), field)
    if n + max_tokens > max_len:
        raise RequestError(_BAD, too_long(max_len, n, max_tokens, what), "max_tokens")
    return Prepared(ids, ids + resume, max_tokens - len(resume), len(resume))
