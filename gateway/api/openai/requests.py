"""The bodies of POST /v1/chat/completions and POST /v1/completions as msgspec Structs, with
the OpenAI API's (and vLLM's) bounds: what protocol.py decodes and converts. Explicit JSON nulls
mean "not given"; a field none of them declares is the gateway's `unknown_fields` (ignored
with a warning, like vLLM, or refused: gateway/policy/unknown_fields.py)."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

import msgspec

from gateway.api.openai.tools import ToolCallParam
from gateway.api.openai.validation import INT32_MAX

_INT32_MIN: Final = -(2**31)
# Choices per request (OpenAI's limit): each is an engine request.
MAX_N: Final = 128

# Sampling.max_tokens and top_k travel to the engine as int32, the seed as uint64.
_MaxTokens = Annotated[int, msgspec.Meta(ge=1, le=INT32_MAX)]
_Temperature = Annotated[float, msgspec.Meta(ge=0.0, le=2.0)]
_TopP = Annotated[float, msgspec.Meta(gt=0.0, le=1.0)]
_TopK = Annotated[int, msgspec.Meta(ge=-1, le=INT32_MAX)]
_Seed = Annotated[int, msgspec.Meta(ge=0)]  # msgspec bounds must fit int64: le checked later
_Int32 = Annotated[int, msgspec.Meta(ge=_INT32_MIN, le=INT32_MAX)]
_Stop = str | Annotated[list[str], msgspec.Meta(max_length=4)]
_Penalty = Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)]
_RepetitionPenalty = Annotated[float, msgspec.Meta(gt=0.0, le=INT32_MAX)]
_MinP = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
_TokenId = Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)]
_Bias = Annotated[float, msgspec.Meta(ge=-100.0, le=100.0)]
_MinTokens = Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)]
_Model = Annotated[str, msgspec.Meta(min_length=1)]
_Truncate = Annotated[int, msgspec.Meta(ge=-1, le=INT32_MAX)]

Role = Literal["system", "user", "assistant", "developer", "tool"]


class ContentPart(msgspec.Struct):
    """One part of a chat message's content; only ``{"type": "text", "text": ...}`` is served."""

    type: str
    text: str | None = None


class ChatMessage(msgspec.Struct):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallParam] | None = None  # an assistant's
    tool_call_id: str | None = None  # a tool message's


class StreamOptions(msgspec.Struct):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None  # vLLM extension
    resumable: bool | None = None  # kept for resume (gateway/streams/ask.py)


class CommonRequest(msgspec.Struct, kw_only=True):
    """Fields shared by both endpoints. Explicit JSON nulls mean "not given"."""

    model: _Model
    max_tokens: _MaxTokens | None = None
    max_completion_tokens: _MaxTokens | None = None
    temperature: _Temperature | None = None
    top_p: _TopP | None = None
    top_k: _TopK | None = None  # vLLM extension; -1 and 0 both mean "off"
    seed: _Seed | None = None
    stop: _Stop | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: int | None = None
    ignore_eos: bool | None = None  # vLLM extension
    # Accepted and without effect on the output.
    user: str | None = None
    metadata: Any = None
    store: Any = None
    service_tier: Any = None
    priority: _Int32 | None = None  # vLLM extension
    echo: bool | None = None
    best_of: int | None = None
    # Sampling beyond the base (each needs an engine that honours it: refused by name else).
    presence_penalty: _Penalty | None = None
    frequency_penalty: _Penalty | None = None
    repetition_penalty: _RepetitionPenalty | None = None  # vLLM extension
    min_p: _MinP | None = None  # vLLM extension
    logit_bias: dict[str, _Bias] | None = None
    stop_token_ids: list[_TokenId] | None = None  # vLLM extension
    include_stop_str_in_output: bool | None = None  # vLLM extension
    min_tokens: _MinTokens | None = None  # vLLM extension
    skip_special_tokens: bool | None = None  # vLLM extension
    spaces_between_special_tokens: bool | None = None  # vLLM extension
    bad_words: list[str] | None = None  # vLLM extension
    allowed_token_ids: list[_TokenId] | None = None  # vLLM extension
    # Not served yet: a request that asks for any of these is refused by name (a 400), never
    # answered as if it had not asked. `None`, or the value that asks for nothing, passes.
    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None  # vLLM extension
    guided_json: Any = None  # vLLM's older structured-output fields
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    prompt_logprobs: int | None = None  # vLLM extension
    logprob_token_ids: list[_TokenId] | None = None  # vLLM extension
    return_token_ids: bool | None = None  # vLLM extension
    truncate_prompt_tokens: _Truncate | None = None  # vLLM extension
    truncation_side: Literal["left", "right"] | None = None  # vLLM extension
    add_special_tokens: bool | None = None  # vLLM extension


class ChatCompletionRequest(CommonRequest, kw_only=True):
    """The body of POST /v1/chat/completions."""

    messages: Annotated[list[ChatMessage], msgspec.Meta(min_length=1)]
    logprobs: bool | None = None
    top_logprobs: int | None = None
    chat_template: str | None = None  # vLLM extensions: chat template controls
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool | None = None
    continue_final_message: bool | None = None
    documents: list[dict[str, str]] | None = None
    include_reasoning: bool | None = None  # vLLM extension
    parallel_tool_calls: bool | None = None


class CompletionRequest(CommonRequest, kw_only=True):
    """The body of POST /v1/completions."""

    prompt: str | list[Any]
    logprobs: int | None = None
    suffix: str | None = None
