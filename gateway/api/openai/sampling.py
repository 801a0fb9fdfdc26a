"""An OpenAI request's sampling fields -> the engine's `Sampling`, with vLLM's checks."""

from __future__ import annotations

from gateway.api.openai.requests import CommonRequest
from gateway.api.openai.structured import structured_of
from gateway.api.openai.validation import EXPECTED, INT32_MAX, UINT64_MAX
from gateway.types import InvalidRequest, Sampling


def sampling(
    req: CommonRequest,
    default_max_tokens: int,
    logprobs: int | None = None,
    prompt_logprobs: int | None = None,
) -> Sampling:
    """The request's sampling fields, checked; `logprobs` and `prompt_logprobs` as the
    endpoint resolved them (chat's top_logprobs, completions' logprobs, echo's)."""
    max_tokens = req.max_completion_tokens
    if max_tokens is None:
        max_tokens = req.max_tokens if req.max_tokens is not None else default_max_tokens
    stop: tuple[str, ...]
    if req.stop is None:
        stop = ()
    elif isinstance(req.stop, str):
        stop = (req.stop,)
    else:
        stop = tuple(req.stop)
    if "" in stop:
        raise InvalidRequest("Invalid value for 'stop': stop strings must not be empty.", "stop")
    if req.seed is not None and req.seed > UINT64_MAX:
        raise InvalidRequest(f"Invalid value for 'seed': {EXPECTED['seed']}.", "seed")
    top_k = req.top_k
    if req.min_tokens is not None and req.min_tokens > max_tokens:
        raise InvalidRequest(
            f"Invalid value for 'min_tokens': must be at most max_tokens ({max_tokens}).",
            "min_tokens",
        )
    if req.allowed_token_ids is not None and not req.allowed_token_ids:
        raise InvalidRequest(
            "Invalid value for 'allowed_token_ids': must not be empty.", "allowed_token_ids"
        )
    return Sampling(
        max_tokens=max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=0 if top_k is None or top_k < 0 else top_k,
        seed=req.seed,
        stop=stop,
        ignore_eos=bool(req.ignore_eos),
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        repetition_penalty=1.0 if req.repetition_penalty is None else req.repetition_penalty,
        min_p=req.min_p or 0.0,
        logit_bias=_logit_bias(req.logit_bias),
        stop_token_ids=tuple(req.stop_token_ids or ()),
        include_stop_str_in_output=bool(req.include_stop_str_in_output),
        min_tokens=req.min_tokens or 0,
        skip_special_tokens=req.skip_special_tokens is not False,
        spaces_between_special_tokens=req.spaces_between_special_tokens is not False,
        bad_words=tuple(req.bad_words or ()),
        allowed_token_ids=(
            tuple(req.allowed_token_ids) if req.allowed_token_ids is not None else None
        ),
        structured=structured_of(req),
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
        logprob_token_ids=tuple(req.logprob_token_ids) if req.logprob_token_ids else None,
        truncate_prompt_tokens=req.truncate_prompt_tokens,
        truncation_side=req.truncation_side or "",
    )


def _logit_bias(bias: dict[str, float] | None) -> dict[int, float] | None:
    """OpenAI's {"token id": bias}; the keys must be token ids."""
    if not bias:
        return None
    out: dict[int, float] = {}
    for key, value in bias.items():
        if not key.isdigit() or int(key) > INT32_MAX:
            raise InvalidRequest(
                f"Invalid value for 'logit_bias': {key!r} is not a token id.", "logit_bias"
            )
        out[int(key)] = value
    return out
