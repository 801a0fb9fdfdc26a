"""An EngineRequest -> the JSON body of the server's /v1/completions or /v1/chat/completions.

The sampling fields keep their names: the request's Sampling is named as vLLM's OpenAI server
names its fields, so each one the request asks for goes through as it is (structured outputs as
vLLM's `structured_outputs`). Each body streams, with usage in the last chunk.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from shardgate.v1.params import TEMPLATE_FIELDS, Generation, Message, Sampling, Structured, asked

from engine_sidecar.backend import EngineRequest
from engine_sidecar.backends.vllm.capabilities import CAPABILITIES

# Prompt logprobs come with a whole answer only (each request here streams).
PROMPT_FIELDS = frozenset({"prompt_logprobs"})
# A prompt's truncation: the server's, or (a request that runs as token ids) the sidecar's, with
# the model's tokenizer here (its truncation side): announced only with one.
TRUNCATION = frozenset({"truncate_prompt_tokens", "truncation_side"})
# The logprobs of chosen tokens come as logprobs do: announced with them.
CHOSEN_LOGPROBS = frozenset({"logprob_token_ids"})
# The optional sampling fields vLLM's OpenAI server takes (the vllm backend's CAPABILITIES),
# less logprobs: those are announced only where the sidecar can give the link's Logprobs
# exactly as the vllm backend does (ids, logprobs, each token as vLLM's detokenizer decodes it,
# the sampled one first): with vLLM and the model's tokenizer on the sidecar's machine, from a
# server that answers /v1/completions' logprobs as token ids (`return_tokens_as_token_ids`, one
# probe at start); see logprobs.py and local.py. Chat's HTTP answers cannot: an alternative's
# `bytes` there are those of "token_id:N", and its top_logprobs drop an entry where the sampled
# token is not among the top ones; so a chat request with logprobs goes to /v1/completions as
# token ids too (the server's /tokenize of its messages), as every resumed request does.
# "tools" (and "reasoning") likewise, parsed on the sidecar (local.py).
NOT_PASSED = frozenset({"logprobs"} | PROMPT_FIELDS | CHOSEN_LOGPROBS | TRUNCATION)
VLLM_CAPABILITIES = CAPABILITIES - NOT_PASSED
# The chat template controls vLLM's server takes, in its chat requests and its /tokenize (the
# one every request that runs as token ids asks); not `documents`: its /tokenize takes none.
TEMPLATE_CAPABILITIES = frozenset(TEMPLATE_FIELDS) - {"documents"}
# Those of the OpenAI API itself, which any compatible server takes.
OPENAI_CAPABILITIES = frozenset({"presence_penalty", "frequency_penalty", "logit_bias"})


def structured_outputs(s: Structured) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if s.json is not None:
        out["json"] = json.loads(s.json)
    if s.json_object is not None:
        out["json_object"] = s.json_object
    if s.regex is not None:
        out["regex"] = s.regex
    if s.choice is not None:
        out["choice"] = list(s.choice)
    if s.grammar is not None:
        out["grammar"] = s.grammar
    return out


def sampling_fields(s: Sampling, max_tokens: int, resumed: int, *, stop: bool) -> dict[str, Any]:
    """`max_tokens` left to generate; `resumed` tokens an earlier run generated (they count
    towards min_tokens); `stop`: let the server apply the stop strings."""
    body: dict[str, Any] = {"max_tokens": max_tokens, "temperature": s.temperature}
    body["top_p"] = s.top_p
    if s.top_k > 0:
        body["top_k"] = s.top_k
    if s.seed is not None:
        body["seed"] = s.seed
    if stop and s.stop:
        body["stop"] = list(s.stop)
    if s.ignore_eos:
        body["ignore_eos"] = True
    for name in asked(s):
        value = getattr(s, name)
        if name == "structured":
            body["structured_outputs"] = structured_outputs(value)
        elif name == "logit_bias":
            body[name] = {str(k): v for k, v in value.items()}
        elif name == "min_tokens":
            if value > resumed:
                body[name] = value - resumed
        else:
            body[name] = list(value) if isinstance(value, tuple) else value
    return body


def message(m: Message) -> dict[str, Any]:
    """A conversation's message as the OpenAI API's (an assistant's calls, a tool's answer)."""
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


def template_fields(g: Generation) -> dict[str, Any]:
    """A request's chat template controls, as vLLM's server names them (chat requests and
    /tokenize), each only where it asks for something: add_generation_prompt always for chat."""
    out: dict[str, Any] = {}
    t = g.template
    if g.messages is not None:
        out["add_generation_prompt"] = t is None or t.add_generation_prompt
        if t is not None:
            if t.chat_template is not None:
                out["chat_template"] = t.chat_template
            if t.kwargs:
                out["chat_template_kwargs"] = json.loads(t.kwargs)
            if t.continue_final_message:
                out["continue_final_message"] = True
    if g.add_special_tokens is not None:
        out["add_special_tokens"] = g.add_special_tokens
    return out


def request_body(
    r: EngineRequest,
    model: str,
    max_tokens: int,
    *,
    token_ids: bool,
    priority: bool,
    prompt_ids: Sequence[int] | None = None,
    stop: bool = True,
    structured: dict[str, Any] | None = None,
    keep_special_tokens: bool = False,
) -> tuple[str, dict[str, Any]]:
    """The path and body for `r`: chat messages to /v1/chat/completions, the rest (and any
    request given as `prompt_ids`: a resumed one) to /v1/completions. `structured`: the
    grammar a tool choice puts on the output; `keep_special_tokens`: its parser reads them."""
    resumed = len(r.resume_token_ids)
    body: dict[str, Any] = {"model": r.lora or model}
    if prompt_ids is not None:
        path, body["prompt"] = "/v1/completions", list(prompt_ids)
    elif r.messages is not None:
        path = "/v1/chat/completions"
        body["messages"] = [message(m) for m in r.messages]
        body.update(template_fields(r.generation))
    elif r.prompt is not None:
        path, body["prompt"] = "/v1/completions", r.prompt
        body.update(template_fields(r.generation))
    else:
        path, body["prompt"] = "/v1/completions", list(r.prompt_token_ids or ())
    body.update(sampling_fields(r.sampling, max_tokens, resumed, stop=stop))
    if prompt_ids is not None:  # (ids the sidecar truncated already: tokens.py)
        for name in TRUNCATION:
            body.pop(name, None)
    if structured is not None:
        body["structured_outputs"] = structured
    if keep_special_tokens:
        body["skip_special_tokens"] = False
    if r.sampling.logprobs is not None:  # (/v1/completions: `logprobs` is the top count)
        body["return_tokens_as_token_ids"] = True
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    if token_ids:
        body["return_token_ids"] = True
    if priority and r.priority:
        body["priority"] = -r.priority  # ours run HIGHER first; vLLM runs the LOWER first
    return path, body
