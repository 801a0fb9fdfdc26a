"""Decoding and validation of OpenAI request bodies into `GenerationRequest`.

The bodies are those of POST /v1/chat/completions and POST /v1/completions as the official
`openai` SDK sends them. Unknown fields are named (gateway/policy/unknown_fields.py: ignored
with a warning, like vLLM, or refused); known fields that ask for something the gateway does
not serve yet (best_of > 1, a suffix, ...) are rejected with a 400 naming the field, never
answered as if they had not been asked; sampling fields beyond the base ones (logprobs among
them) are decoded and refused later, by name, when the model's engine does not honour them
(runtime/service.py); a body nested too deeply for the decoder is a 400 too. Every error is
an `InvalidRequest` whose `param` is the field as OpenAI names it, e.g. ``"messages[0].content"``.

The hot path of every request: one cached decoder per endpoint (validation.BodyDecoder).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from gateway.api.openai.requests import (
    MAX_N,
    ChatCompletionRequest,
    ChatMessage,
    CommonRequest,
    CompletionRequest,
    ContentPart,
    StreamOptions,
)
from gateway.api.openai.sampling import sampling
from gateway.api.openai.template import template_of
from gateway.api.openai.tools import tool_calls_of, tools_of
from gateway.api.openai.validation import (
    EXPECTED,
    EXPECTED_CHAT,
    EXPECTED_COMPLETION,
    INT32_MAX,
    BodyDecoder,
    not_served,
    validation_error,
)
from gateway.types import GenerationRequest, InvalidRequest, Message, Sampling

__all__ = [
    "MAX_N",
    "ChatCompletionRequest",
    "ChatMessage",
    "CompletionRequest",
    "ContentPart",
    "StreamOptions",
    "decode_chat",
    "decode_completion",
]

_CHAT_DECODER: Final = BodyDecoder(ChatCompletionRequest, EXPECTED_CHAT)
_COMPLETION_DECODER: Final = BodyDecoder(CompletionRequest, EXPECTED_COMPLETION)


# --- conversion ------------------------------------------------------------------------------


def _check_logprob_ids(req: CommonRequest, logprobs: int | None) -> None:
    if req.logprob_token_ids and logprobs is None:
        raise InvalidRequest(
            "when using `logprob_token_ids`, `logprobs` must be set.", "logprob_token_ids"
        )


def _prompt_logprobs(req: CommonRequest, echoed: int | None) -> int | None:
    """vLLM's prompt_logprobs: the field, or with echo the logprobs asked of the output
    (`echoed`); given with a whole answer only."""
    n = req.prompt_logprobs
    if n is not None:
        if n < 0 and n != -1:
            raise InvalidRequest(
                "`prompt_logprobs` must be a positive value or -1.", "prompt_logprobs"
            )
        if req.stream and n != 0:
            raise InvalidRequest(
                "`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs"
            )
    elif req.echo:
        n = echoed
    if n is not None and (req.n or 1) > 1:
        raise not_served(_why_prompt_logprobs(req), "prompt logprobs are served for one choice")
    return n


def _why_prompt_logprobs(req: CommonRequest) -> str:
    return "prompt_logprobs" if req.prompt_logprobs is not None else "echo"


def _no_tools(req: CommonRequest, why: str) -> None:
    if req.tools:
        raise not_served("tools", why)
    if req.tool_choice is not None and req.tool_choice != "none":
        raise not_served("tool_choice", why)


def _check_common(req: CommonRequest) -> None:
    if req.n is not None and not 1 <= req.n <= MAX_N:
        raise InvalidRequest(f"Invalid value for 'n': must be between 1 and {MAX_N}.", "n")
    if req.n is not None and req.n > 1 and req.temperature is not None and req.temperature < 1e-5:
        raise InvalidRequest(
            f"Invalid value for 'n': must be 1 with greedy sampling (temperature 0), got {req.n}.",
            "n",
        )
    if req.best_of is not None and req.best_of != 1:
        raise InvalidRequest("Invalid value for 'best_of': only best_of=1 is supported.", "best_of")
    if req.stream_options is not None and not req.stream:
        raise InvalidRequest(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
        )


def _request(
    req: CommonRequest,
    request_id: str,
    default_max_tokens: int,
    prompt: str | None = None,
    messages: tuple[Message, ...] | None = None,
    prompt_token_ids: tuple[int, ...] | None = None,
    logprobs: int | None = None,
    prompt_logprobs: int | None = None,
) -> GenerationRequest:
    stream = bool(req.stream)
    opts = req.stream_options
    out = GenerationRequest(
        request_id=request_id,
        model=req.model,
        sampling=sampling(req, default_max_tokens, logprobs, prompt_logprobs),
        prompt=prompt,
        messages=messages,
        prompt_token_ids=prompt_token_ids,
        stream=stream,
        include_usage=stream and opts is not None and bool(opts.include_usage),
        priority=req.priority,
    )
    out.n = req.n or 1
    out.return_token_ids = bool(req.return_token_ids)
    # (vLLM: only with include_usage)
    out.continuous_usage = out.include_usage and bool(opts and opts.continuous_usage_stats)
    out.resumable = opts.resumable if opts is not None else None
    return out


def message_of(i: int, msg: ChatMessage) -> Message:
    # Chat templates rarely know OpenAI's "developer" role; it means "system" there.
    role = "system" if msg.role == "developer" else msg.role
    content = msg.content
    if msg.tool_calls or msg.tool_call_id is not None:
        return _tool_message(i, msg, role)
    if isinstance(content, str):
        return Message(role, content)
    if content is None:
        if msg.role != "assistant":
            param = f"messages[{i}].content"
            raise InvalidRequest(
                f"Invalid value for '{param}': content is required for '{msg.role}' messages.",
                param,
            )
        return Message(role, "")
    return Message(role, _text_of(i, content))


def _tool_message(i: int, msg: ChatMessage, role: str) -> Message:
    """An assistant's message with tool calls, or a tool's answer to one."""
    content = msg.content
    text = "" if content is None else content if isinstance(content, str) else _text_of(i, content)
    if msg.role == "tool":
        return Message(role, text, tool_call_id=msg.tool_call_id)
    if msg.tool_call_id is not None:
        raise InvalidRequest(
            f"Invalid value for 'messages[{i}].tool_call_id': only tool messages answer a call.",
            f"messages[{i}].tool_call_id",
        )
    if msg.role != "assistant":
        raise InvalidRequest(
            f"Invalid value for 'messages[{i}].tool_calls': only assistant messages call tools.",
            f"messages[{i}].tool_calls",
        )
    return Message(role, text, tool_calls_of(msg.tool_calls, i))


def _text_of(i: int, content: list[ContentPart]) -> str:
    texts: list[str] = []
    for j, part in enumerate(content):
        if part.type != "text":
            param = f"messages[{i}].content[{j}].type"
            raise InvalidRequest(
                f"Invalid value for '{param}': only 'text' content parts are supported, "
                f"got {part.type!r}.",
                param,
            )
        if part.text is None:
            param = f"messages[{i}].content[{j}].text"
            raise InvalidRequest(f"Missing required parameter: '{param}'.", param)
        texts.append(part.text)
    # Text parts are joined with newlines, as vLLM does.
    return "\n".join(texts)


def _chat_logprobs(logprobs: bool | None, top: int | None) -> int | None:
    """Chat's logprobs / top_logprobs -> the engine's number of top logprobs (vLLM's checks)."""
    if top is not None:
        if top < 0 and top != -1:
            raise InvalidRequest(
                "Invalid value for 'top_logprobs': must be at least 0, or -1 (all).",
                "top_logprobs",
            )
        if top != 0 and not logprobs:
            raise InvalidRequest(
                "Invalid value for 'top_logprobs': needs logprobs set to true.", "top_logprobs"
            )
    return (top or 0) if logprobs else None


def sampling_of(
    fields: dict[str, Any], default_max_tokens: int, logprobs: int | None = None
) -> Sampling:
    """Sampling from fields named as in the OpenAI API (another API's request, mapped), with
    the same bounds, checks and errors as a JSON body's; `logprobs` as completions take it."""
    try:
        req = msgspec.convert({"model": "-", **fields}, CommonRequest)
    except msgspec.ValidationError as err:
        raise validation_error(err, EXPECTED) from None
    _check_common(req)
    _no_tools(req, "tool calls are served by the OpenAI chat completions API")
    _check_logprob_ids(req, logprobs)
    if logprobs is not None and logprobs < -1:
        raise InvalidRequest(
            "Invalid value for 'logprobs': must be at least 0, or -1 (all).", "logprobs"
        )
    prompt_logprobs = req.prompt_logprobs
    if prompt_logprobs is not None and prompt_logprobs < -1:
        raise InvalidRequest("`prompt_logprobs` must be a positive value or -1.", "prompt_logprobs")
    return sampling(req, default_max_tokens, logprobs, prompt_logprobs)


def decode_chat(body: bytes, request_id: str, default_max_tokens: int = 256) -> GenerationRequest:
    """Decode and validate a POST /v1/chat/completions body.

    `default_max_tokens` applies when neither max_tokens nor max_completion_tokens is given
    (OpenAI's default is "the rest of the context", which the caller knows, not this layer).
    Raises `InvalidRequest` with the offending field in `param`.
    """
    req, unknown = _CHAT_DECODER.decode(body)
    _check_common(req)
    logprobs = _chat_logprobs(req.logprobs, req.top_logprobs)
    _check_logprob_ids(req, logprobs)
    prompt_logprobs = _prompt_logprobs(req, req.top_logprobs)
    if req.include_reasoning is False:
        # (vLLM then gives no logprobs or token ids either: they would show the reasoning's
        # tokens; asked for both, the request is refused instead of answered without them)
        for field, value in (
            ("logprobs", req.logprobs),
            ("return_token_ids", req.return_token_ids),
        ):
            if value:
                raise InvalidRequest(
                    f"Invalid value for '{field}': not given with include_reasoning false "
                    "(they would show the reasoning's tokens).",
                    field,
                )
    template = template_of(
        req.chat_template,
        req.chat_template_kwargs,
        req.add_generation_prompt,
        req.continue_final_message,
        req.documents,
    )
    messages = tuple([message_of(i, m) for i, m in enumerate(req.messages)])
    out = _request(
        req,
        request_id,
        default_max_tokens,
        messages=messages,
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
    )
    out.echo = bool(req.echo)  # (the last message, where it is the answer's role: echo.py)
    out.hide_reasoning = req.include_reasoning is False
    out.generation.tools = tools_of(req.tools, req.tool_choice, req.parallel_tool_calls)
    out.generation.template = template
    if req.add_special_tokens:  # (vLLM's default for chat: false, the template adds them)
        out.generation.add_special_tokens = True
    out.unknown_fields = unknown
    return out


def decode_completion(
    body: bytes, request_id: str, default_max_tokens: int = 16
) -> GenerationRequest:
    """Decode and validate a POST /v1/completions body.

    `default_max_tokens` applies when max_tokens is not given (OpenAI's default is 16).
    Raises `InvalidRequest` with the offending field in `param`.
    """
    req, unknown = _COMPLETION_DECODER.decode(body)
    out = _completion(req, request_id, default_max_tokens)
    out.unknown_fields = unknown
    return out


def _completion(req: CompletionRequest, rid: str, default_max_tokens: int) -> GenerationRequest:
    _check_common(req)
    _no_tools(req, "completions call no tools (chat completions do)")
    logprobs = req.logprobs
    if logprobs is not None and logprobs < 0 and logprobs != -1:
        raise InvalidRequest(
            "Invalid value for 'logprobs': must be at least 0, or -1 (all).", "logprobs"
        )
    _check_logprob_ids(req, logprobs)
    prompt_logprobs = _prompt_logprobs(req, logprobs)
    if req.suffix:
        raise not_served("suffix", "completions take no suffix")
    prompt = req.prompt
    if len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        out = _request(
            req,
            rid,
            default_max_tokens,
            prompt=prompt,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
        )
        # (with token ids, vLLM echoes the prompt's ids, not its text)
        out.echo = bool(req.echo) and not req.return_token_ids
        if req.add_special_tokens is False:  # (vLLM's default for completions: true)
            out.generation.add_special_tokens = False
        return out
    if prompt and all(type(t) is int and 0 <= t <= INT32_MAX for t in prompt):
        ids = tuple(prompt)
        out = _request(
            req,
            rid,
            default_max_tokens,
            prompt_token_ids=ids,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
        )
        out.echo = bool(req.echo) and not req.return_token_ids  # (their text: echo.py)
        return out
    if prompt and all(isinstance(p, (str, list)) for p in prompt):
        if prompt_logprobs is not None:
            why = _why_prompt_logprobs(req)
            raise not_served(why, "prompt logprobs are served for one prompt, not a batch")
        return _batch(req, rid, default_max_tokens, prompt, logprobs)
    raise InvalidRequest(
        "Invalid value for 'prompt': must be a string, or a non-empty array of token ids "
        "(integers of at least 0).",
        "prompt",
    )


def _batch(
    req: CompletionRequest,
    request_id: str,
    default_max_tokens: int,
    prompts: list[Any],
    logprobs: int | None,
) -> GenerationRequest:
    """A batch of prompts (texts or token-id lists): n choices of each, as vLLM answers it."""
    if len({isinstance(p, str) for p in prompts}) > 1:
        raise InvalidRequest(
            "Invalid value for 'prompt': a batch is of strings or of token-id arrays, not both.",
            "prompt",
        )
    batch: list[str | tuple[int, ...]] = []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            batch.append(p)
        elif p and all(type(t) is int and 0 <= t <= INT32_MAX for t in p):
            if req.echo:
                raise not_served("echo", "a prompt of token ids is not echoed (send its text)")
            batch.append(tuple(p))
        else:
            raise InvalidRequest(
                f"Invalid value for 'prompt[{i}]': must be a string, or a non-empty array of "
                "token ids (integers of at least 0).",
                f"prompt[{i}]",
            )
    if len(batch) * (req.n or 1) > MAX_N:
        raise InvalidRequest(
            f"Invalid value for 'prompt': at most {MAX_N} choices (prompts times n).", "prompt"
        )
    first = batch[0]
    text, ids = (first, None) if isinstance(first, str) else (None, first)
    out = _request(
        req, request_id, default_max_tokens, prompt=text, prompt_token_ids=ids, logprobs=logprobs
    )
    out.echo = bool(req.echo)
    if req.add_special_tokens is False:
        out.generation.add_special_tokens = False
    out.batch = tuple(batch)
    return out
