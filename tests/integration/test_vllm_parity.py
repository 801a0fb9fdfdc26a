"""The gateway answers as `vllm serve` does: the same requests to both, the answers compared.

Both run the tiny model with the same engine arguments: the gateway through a sidecar on the
session's in-process engine, `vllm serve` as its own process (tests/vllm_server.py). The dummy
weights are seeded, so greedy and seeded requests must give the same content, logprobs (to
1e-3), usage and finish reasons, streamed and not. Requests go one at a time, so that neither
engine batches them differently.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import pytest_asyncio

from tests.integration.vllm_cluster import vllm_cluster

pytestmark = pytest.mark.timeout(900)  # may start the shared engine and vllm serve

MODEL = "tiny-llama"
MESSAGES: list[Any] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name three shards of glass."},
]


@pytest_asyncio.fixture(scope="module")
async def gateway_url(tiny_model_dir: Path, vllm_engine: Any) -> AsyncIterator[str]:
    async with vllm_cluster(tiny_model_dir, vllm_engine, "  default_max_tokens: 16") as c:
        yield c.base_url


@pytest_asyncio.fixture(scope="module")
async def clients(
    gateway_url: str, vllm_server: str
) -> AsyncIterator[tuple[openai.AsyncOpenAI, openai.AsyncOpenAI]]:
    def client(url: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=url, api_key="none", max_retries=0, timeout=120.0)

    async with client(gateway_url) as ours, client(vllm_server + "/v1") as theirs:
        yield ours, theirs


# --- what is compared --------------------------------------------------------------------------


def _close(a: Any, b: Any, path: str = "") -> None:
    """Equal, except floats (logprobs) to 1e-3."""
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, int | float) and isinstance(b, int | float), path
        assert math.isclose(a, b, abs_tol=1e-3), f"{path}: {a} != {b}"
    elif isinstance(a, dict) and isinstance(b, dict):
        assert list(a) == list(b), f"{path}: keys {list(a)} != {list(b)}"
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{path}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def _usage(u: Any) -> tuple[int, int, int]:
    return (u.prompt_tokens, u.completion_tokens, u.total_tokens)


def _chat(r: Any) -> dict[str, Any]:
    return {
        "choices": [
            {
                "index": c.index,
                "role": c.message.role,
                "content": c.message.content,
                "finish_reason": c.finish_reason,
                "logprobs": c.logprobs.model_dump() if c.logprobs is not None else None,
            }
            for c in r.choices
        ],
        "usage": _usage(r.usage),
    }


def _completion(r: Any) -> dict[str, Any]:
    return {
        "choices": [
            {
                "index": c.index,
                "text": c.text,
                "finish_reason": c.finish_reason,
                "logprobs": c.logprobs.model_dump() if c.logprobs is not None else None,
            }
            for c in r.choices
        ],
        "usage": _usage(r.usage),
    }


def _merge_logprobs(into: dict[str, Any] | None, part: dict[str, Any]) -> dict[str, Any]:
    if into is None:
        return part
    for key, value in part.items():
        if isinstance(value, list):
            into[key] = (into.get(key) or []) + value
    return into


async def _chat_stream(client: openai.AsyncOpenAI, **kwargs: Any) -> dict[str, Any]:
    choices: dict[int, dict[str, Any]] = {}
    usage = None
    stream = await client.chat.completions.create(
        stream=True, stream_options={"include_usage": True}, **kwargs
    )
    async for chunk in stream:
        if chunk.usage is not None:
            usage = _usage(chunk.usage)
        for c in chunk.choices:
            out = choices.setdefault(
                c.index,
                {"index": c.index, "role": None, "content": "", "finish_reason": None},
            )
            out.setdefault("logprobs", None)
            if c.delta.role is not None:
                out["role"] = c.delta.role
            out["content"] += c.delta.content or ""
            if c.finish_reason is not None:
                out["finish_reason"] = c.finish_reason
            if c.logprobs is not None and c.logprobs.content:
                out["logprobs"] = _merge_logprobs(out["logprobs"], c.logprobs.model_dump())
    return {"choices": [choices[i] for i in sorted(choices)], "usage": usage}


async def _completion_stream(client: openai.AsyncOpenAI, **kwargs: Any) -> dict[str, Any]:
    choices: dict[int, dict[str, Any]] = {}
    usage = None
    stream = await client.completions.create(
        stream=True, stream_options={"include_usage": True}, **kwargs
    )
    async for chunk in stream:
        if chunk.usage is not None:
            usage = _usage(chunk.usage)
        for c in chunk.choices:
            out = choices.setdefault(
                c.index, {"index": c.index, "text": "", "finish_reason": None, "logprobs": None}
            )
            out["text"] += c.text
            if c.finish_reason is not None:
                out["finish_reason"] = c.finish_reason
            if c.logprobs is not None and c.logprobs.tokens:
                out["logprobs"] = _merge_logprobs(out["logprobs"], c.logprobs.model_dump())
    return {"choices": [choices[i] for i in sorted(choices)], "usage": usage}


# --- the requests ------------------------------------------------------------------------------

GREEDY: dict[str, Any] = {"temperature": 0.0, "max_tokens": 12}

CHAT_CASES: dict[str, dict[str, Any]] = {
    "greedy": {},
    "max_completion_tokens": {"max_tokens": None, "max_completion_tokens": 7},
    "seeded": {"temperature": 0.9, "seed": 1234, "top_p": 0.9},
    "top_k": {"temperature": 1.0, "seed": 7, "extra_body": {"top_k": 5}},
    "stop": {"stop": ["a", "e"]},
    "penalties": {"presence_penalty": 1.5, "frequency_penalty": 1.0},
    "repetition_penalty": {"extra_body": {"repetition_penalty": 1.8}},
    "min_p": {"temperature": 1.0, "seed": 3, "extra_body": {"min_p": 0.2}},
    "logit_bias": {"logit_bias": {"300": 50, "301": 49}},
    "min_tokens": {"extra_body": {"min_tokens": 10, "ignore_eos": False}},
    "stop_token_ids": {"extra_body": {"stop_token_ids": [300]}, "logit_bias": {"300": 5}},
    "bad_words": {"extra_body": {"bad_words": ["P"]}},
    "allowed_token_ids": {"extra_body": {"allowed_token_ids": [300, 301, 302]}},
    "logprobs": {"logprobs": True},
    "top_logprobs": {"logprobs": True, "top_logprobs": 3},
    "logprob_token_ids": {"logprobs": True, "extra_body": {"logprob_token_ids": [300, 301, 1000]}},
    "logprob_token_ids_top": {
        "logprobs": True,
        "top_logprobs": 5,
        "extra_body": {"logprob_token_ids": [302]},
    },
    "choice": {"extra_body": {"structured_outputs": {"choice": ["left", "right"]}}},
    "regex": {"extra_body": {"structured_outputs": {"regex": "[a-c]{2,5}"}}},
    "n_seeded": {"n": 3, "temperature": 0.9, "seed": 5},
    # chat template controls (the tiny model's template reads add_generation_prompt only)
    "no_generation_prompt": {"extra_body": {"add_generation_prompt": False}},
    "continue_final_message": {
        "messages": [*MESSAGES, {"role": "assistant", "content": "Glass, ice and"}],
        "extra_body": {"add_generation_prompt": False, "continue_final_message": True},
    },
    "chat_template_kwargs": {"extra_body": {"chat_template_kwargs": {"style": "terse"}}},
    "documents": {"extra_body": {"documents": [{"title": "glass", "text": "Shards cut."}]}},
    "add_special_tokens": {"extra_body": {"add_special_tokens": True}},
    # echo: the last message, where it is the answer's role (here, the one it continues)
    "echo": {
        "messages": [*MESSAGES, {"role": "assistant", "content": "Glass, ice and"}],
        "extra_body": {
            "echo": True,
            "add_generation_prompt": False,
            "continue_final_message": True,
        },
    },
    "echo_not_the_role": {"extra_body": {"echo": True}},
    "truncate": {"extra_body": {"truncate_prompt_tokens": 9}},
    "truncate_left": {"extra_body": {"truncate_prompt_tokens": 9, "truncation_side": "left"}},
    "json_schema": {
        "response_format": {
            "type": "json_schema",
            "n_seeded": {"n": 3, "temperature": 0.9, "seed": 5},
            "json_schema": {
                "name": "side",
                "schema": {"type": "object", "properties": {"x": {"type": "integer"}}},
            },
        },
        "max_tokens": 24,
    },
}

COMPLETION_CASES: dict[str, dict[str, Any]] = {
    "greedy": {},
    "no_special_tokens": {"extra_body": {"add_special_tokens": False}},
    # a batch of prompts: choice p * n + i of prompt p, usage summed
    "batch": {"prompt": ["Shards of", "Glass is", "A"]},
    "batch_ids": {"prompt": [[300, 301], [302, 303, 304]]},
    "batch_n": {"prompt": ["Shards of", "Glass is"], "n": 2, "temperature": 0.8, "seed": 11},
    "batch_echo": {"prompt": ["Shards of", "Glass is"], "echo": True},
    "batch_logprobs": {"prompt": ["Shards of", "Glass is"], "logprobs": 2},
    "seeded": {"temperature": 0.8, "seed": 99},
    "stop": {"stop": [" S", "h"]},
    "logprobs_0": {"logprobs": 0},
    "logprobs_3": {"logprobs": 3},
    "logprob_token_ids": {"logprobs": 1, "extra_body": {"logprob_token_ids": [300, 301, 1000]}},
    "echo_logprob_token_ids": {
        "echo": True,
        "logprobs": 1,
        "extra_body": {"logprob_token_ids": [300, 301]},
    },
    "echo": {"echo": True},
    "echo_logprobs": {"echo": True, "logprobs": 2},
    "echo_ids": {"prompt": [1, 300, 301, 302], "echo": True},
    "echo_ids_logprobs": {"prompt": [1, 300, 301], "echo": True, "logprobs": 1},
    "echo_logprobs_0": {"echo": True, "logprobs": 0},
    "truncate": {
        "prompt": "Shards of glass cut the hand",
        "extra_body": {"truncate_prompt_tokens": 3},
    },
    "truncate_left": {
        "prompt": "Shards of glass cut the hand",
        "extra_body": {"truncate_prompt_tokens": 3, "truncation_side": "left"},
    },
    "truncate_right": {
        "prompt": "Shards of glass cut the hand",
        "extra_body": {"truncate_prompt_tokens": 3, "truncation_side": "right"},
    },
    "truncate_ids": {"prompt": [300, 301, 302, 303], "extra_body": {"truncate_prompt_tokens": 2}},
    "truncate_to_the_model": {"extra_body": {"truncate_prompt_tokens": -1}},
    "ignore_eos": {"extra_body": {"ignore_eos": True}, "max_tokens": 20},
    "include_stop_str": {"stop": ["h"], "extra_body": {"include_stop_str_in_output": True}},
    # The start-of-text token, likeliest, ignored EOS: its text "<s>" kept, or not.
    "special_kept": {
        "logit_bias": {"1": 30},
        "extra_body": {"skip_special_tokens": False, "ignore_eos": True},
    },
    "special_skipped": {"logit_bias": {"1": 30}, "extra_body": {"ignore_eos": True}},
    "n_seeded": {"n": 2, "temperature": 0.8, "seed": 11},
    "n_logprobs": {"n": 2, "logprobs": 2, "temperature": 1.0, "seed": 3},
}


def _drop_unsupported(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if v is not None}


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize("case", sorted(CHAT_CASES))
async def test_chat_answers_as_vllm_serve(
    clients: tuple[openai.AsyncOpenAI, openai.AsyncOpenAI], case: str, stream: bool
) -> None:
    kwargs = _drop_unsupported({"model": MODEL, "messages": MESSAGES, **GREEDY, **CHAT_CASES[case]})
    answers = []
    for client in clients:
        if stream:
            answers.append(await _chat_stream(client, **kwargs))
        else:
            answers.append(_chat(await client.chat.completions.create(**kwargs)))
    ours, theirs = answers
    _close(ours, theirs, case)


async def test_n_with_greedy_sampling_is_refused_as_vllm_serve_does(
    clients: tuple[openai.AsyncOpenAI, openai.AsyncOpenAI],
) -> None:
    for client in clients:
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(
                model=MODEL, messages=MESSAGES, n=2, temperature=0.0, max_tokens=4
            )


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize("case", sorted(COMPLETION_CASES))
async def test_completions_answer_as_vllm_serve(
    clients: tuple[openai.AsyncOpenAI, openai.AsyncOpenAI], case: str, stream: bool
) -> None:
    kwargs = _drop_unsupported(
        {"model": MODEL, "prompt": "Shards of", **GREEDY, **COMPLETION_CASES[case]}
    )
    answers = []
    for client in clients:
        if stream:
            answers.append(await _completion_stream(client, **kwargs))
        else:
            answers.append(_completion(await client.completions.create(**kwargs)))
    ours, theirs = answers
    _close(ours, theirs, case)


# Bodies both servers refuse (a 400): a request's own template on a server that does not trust
# them, and generation prompts that contradict each other.
CHAT_REFUSED: dict[str, dict[str, Any]] = {
    "chat_template": {"chat_template": "{{ messages }}"},
    "kwargs_chat_template": {"chat_template_kwargs": {"chat_template": "{{ messages }}"}},
    "both_prompts": {"add_generation_prompt": True, "continue_final_message": True},
    "continue_with_generation_prompt": {"continue_final_message": True},
}


@pytest.mark.parametrize("case", sorted(CHAT_REFUSED))
async def test_chat_template_refusals_are_vllm_serve_s(
    clients: tuple[openai.AsyncOpenAI, openai.AsyncOpenAI], case: str
) -> None:
    for client in clients:
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(
                model=MODEL, messages=MESSAGES, max_tokens=4, extra_body=CHAT_REFUSED[case]
            )


TOKENIZE_CASES: dict[str, dict[str, Any]] = {
    "chat": {"messages": MESSAGES},
    "no_generation_prompt": {"messages": MESSAGES, "add_generation_prompt": False},
    "continue_final_message": {
        "messages": [*MESSAGES, {"role": "assistant", "content": "Glass"}],
        "add_generation_prompt": False,
        "continue_final_message": True,
    },
    "chat_special_tokens": {"messages": MESSAGES, "add_special_tokens": True},
    "chat_template_kwargs": {"messages": MESSAGES, "chat_template_kwargs": {"style": "x"}},
    "prompt": {"prompt": "Shards of"},
    "prompt_no_special_tokens": {"prompt": "Shards of", "add_special_tokens": False},
}


@pytest.mark.parametrize("case", sorted(TOKENIZE_CASES))
async def test_tokenize_answers_as_vllm_serve(
    gateway_url: str, vllm_server: str, case: str
) -> None:
    body = {"model": MODEL, **TOKENIZE_CASES[case]}
    answers = []
    async with httpx.AsyncClient(timeout=60.0) as http:
        for base in (gateway_url.removesuffix("/v1"), vllm_server):
            r = await http.post(base + "/tokenize", json=body)
            assert r.status_code == 200, r.text
            answers.append(r.json()["tokens"])
    assert answers[0] == answers[1]


@pytest_asyncio.fixture(scope="module")
async def trusting_url(tiny_model_dir: Path, vllm_engine: Any) -> AsyncIterator[str]:
    """A gateway whose sidecar (on the same engine) takes requests' own chat templates."""
    trusting = {"trust_request_chat_template": True}
    async with vllm_cluster(tiny_model_dir, vllm_engine, "  default_max_tokens: 16", trusting) as c:
        yield c.base_url


async def test_a_trusted_request_template_is_the_one_applied(
    trusting_url: str, clients: tuple[openai.AsyncOpenAI, openai.AsyncOpenAI]
) -> None:
    from engine_sidecar.backends.tiny_model import CHAT_TEMPLATE

    _, theirs = clients
    kwargs: dict[str, Any] = {"model": MODEL, "messages": MESSAGES, **GREEDY}
    async with openai.AsyncOpenAI(base_url=trusting_url, api_key="none", max_retries=0) as ours:
        # The model's own template, sent with the request: vLLM's answer without it.
        same = await ours.chat.completions.create(
            **kwargs, extra_body={"chat_template": CHAT_TEMPLATE}
        )
        _close(_chat(same), _chat(await theirs.chat.completions.create(**kwargs)))
        # Another template (with a variable of its own): the prompt is that template's.
        other = "{{ style }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
        extra = {"chat_template": other, "chat_template_kwargs": {"style": "Terse: "}}
        answer = await ours.chat.completions.create(**kwargs, extra_body=extra)
        text = "Terse: " + "".join(m["content"] for m in MESSAGES)
        their_prompt = await theirs.completions.create(
            model=MODEL, prompt=text, extra_body={"add_special_tokens": False}, **GREEDY
        )
        assert answer.usage is not None and their_prompt.usage is not None
        assert answer.usage.prompt_tokens == their_prompt.usage.prompt_tokens
        assert answer.choices[0].message.content == their_prompt.choices[0].text


# --- return_token_ids: the answers as JSON (the SDK's types do not name these fields) ----------


def _ids_of_body(answer: dict[str, Any]) -> dict[str, Any]:
    return {
        "prompt_token_ids": answer.get("prompt_token_ids"),
        "choices": [
            {
                "index": c["index"],
                "prompt_token_ids": c.get("prompt_token_ids"),
                "token_ids": c.get("token_ids"),
                "text": c["message"]["content"] if "message" in c else c["text"],
            }
            for c in answer["choices"]
        ],
    }


def _ids_of_stream(lines: list[str]) -> dict[str, Any]:
    """The stream's prompt ids (where they came, and that they came once per choice) and each
    choice's ids and text, joined."""
    prompt: list[Any] = []
    choices: dict[int, dict[str, Any]] = {}
    for line in lines:
        if not line.startswith("data: {"):
            continue
        chunk = json.loads(line.removeprefix("data: "))
        if "prompt_token_ids" in chunk and chunk["prompt_token_ids"] is not None:
            prompt.append(chunk["prompt_token_ids"])
        for c in chunk["choices"]:
            out = choices.setdefault(
                c["index"],
                {"index": c["index"], "prompt_token_ids": [], "token_ids": [], "text": ""},
            )
            if c.get("prompt_token_ids") is not None:
                out["prompt_token_ids"].append(c["prompt_token_ids"])
            out["token_ids"] += c.get("token_ids") or []
            out["text"] += c["delta"].get("content") or "" if "delta" in c else c["text"]
    return {"prompt_token_ids": prompt, "choices": [choices[i] for i in sorted(choices)]}


TOKEN_ID_CASES: dict[str, dict[str, Any]] = {
    "chat": {"messages": MESSAGES},
    "chat_n": {"messages": MESSAGES, "n": 2, "temperature": 0.9, "seed": 5},
    "completion": {"prompt": "Shards of"},
    "completion_ids": {"prompt": [300, 301, 302]},
    "completion_n": {"prompt": "Shards of", "n": 2, "temperature": 0.8, "seed": 11},
    "completion_echo": {"prompt": "Shards of", "echo": True},
    "completion_batch": {"prompt": ["Shards of", "Glass"], "n": 2, "temperature": 0.8, "seed": 2},
    "completion_batch_ids": {"prompt": [[300, 301], [302]]},
}


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize("case", sorted(TOKEN_ID_CASES))
async def test_return_token_ids_answers_as_vllm_serve(
    gateway_url: str, vllm_server: str, case: str, stream: bool
) -> None:
    fields = TOKEN_ID_CASES[case]
    path = "/chat/completions" if "messages" in fields else "/completions"
    body = {"model": MODEL, **GREEDY, **fields, "return_token_ids": True, "stream": stream}
    answers = []
    async with httpx.AsyncClient(timeout=120.0) as http:
        for base in (gateway_url, vllm_server + "/v1"):
            r = await http.post(base + path, json=body)
            assert r.status_code == 200, r.text
            answers.append(
                _ids_of_stream(r.text.splitlines()) if stream else _ids_of_body(r.json())
            )
    ours, theirs = answers
    assert ours == theirs
    # (the case shows ids: prompt ids, and generated ones in every choice)
    assert ours["prompt_token_ids"] or all(c["prompt_token_ids"] for c in ours["choices"])
    assert all(c["token_ids"] for c in ours["choices"])


# --- stream_options.continuous_usage_stats -----------------------------------------------------


def _usages(lines: list[str]) -> dict[str, Any]:
    """What the usage in the chunks says: whether every chunk of a choice had one, whether each
    counted the tokens of its choice up to it (their `token_ids`), each choice's prompt and last
    count, and the last usage chunk. (Where chunks are cut is the engine's timing: vLLM merges
    the outputs of steps its server has not sent yet, so those are not compared.)"""
    per: dict[int, dict[str, Any]] = {}
    every = counted = True
    last = None
    for line in lines:
        if not line.startswith("data: {"):
            continue
        chunk = json.loads(line.removeprefix("data: "))
        u = chunk.get("usage")
        if not chunk["choices"]:
            last = (u["prompt_tokens"], u["completion_tokens"], u["total_tokens"])
            continue
        every = every and u is not None
        if u is None:
            continue
        c = chunk["choices"][0]
        seen = per.setdefault(c["index"], {"prompt": set(), "ids": 0, "completion": 0})
        seen["ids"] += len(c.get("token_ids") or [])
        seen["prompt"].add(u["prompt_tokens"])
        seen["completion"] = u["completion_tokens"]
        counted = counted and u["completion_tokens"] == seen["ids"]
        counted = counted and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    return {
        "every": every,
        "counted": counted,
        "per_choice": [per[i] for i in sorted(per)],
        "last": last,
    }


USAGE_CASES: dict[str, dict[str, Any]] = {
    "chat": {"messages": MESSAGES},
    "chat_n": {"messages": MESSAGES, "n": 2, "temperature": 0.9, "seed": 5},
    "completion": {"prompt": "Shards of"},
    "completion_n": {"prompt": "Shards of", "n": 2, "temperature": 0.8, "seed": 11},
}


@pytest.mark.parametrize("case", sorted(USAGE_CASES))
async def test_continuous_usage_stats_as_vllm_serve(
    gateway_url: str, vllm_server: str, case: str
) -> None:
    fields = USAGE_CASES[case]
    path = "/chat/completions" if "messages" in fields else "/completions"
    options = {"include_usage": True, "continuous_usage_stats": True}
    body = {**GREEDY, **fields, "stream": True, "stream_options": options}
    body.update(model=MODEL, return_token_ids=True)  # (what the counts are checked against)
    answers = []
    async with httpx.AsyncClient(timeout=120.0) as http:
        for base in (gateway_url, vllm_server + "/v1"):
            r = await http.post(base + path, json=body)
            assert r.status_code == 200, r.text
            answers.append(_usages(r.text.splitlines()))
    ours, theirs = answers
    assert ours == theirs
    assert ours["every"] and ours["counted"] and ours["last"] is not None


async def test_continuous_usage_stats_needs_include_usage_as_in_vllm_serve(
    gateway_url: str, vllm_server: str
) -> None:
    options = {"continuous_usage_stats": True}
    body = {"model": MODEL, **GREEDY, "prompt": "Shards", "stream": True, "stream_options": options}
    async with httpx.AsyncClient(timeout=120.0) as http:
        for base in (gateway_url, vllm_server + "/v1"):
            r = await http.post(base + "/completions", json=body)
            assert r.status_code == 200, r.text
            assert '"usage"' not in r.text or '"usage":null' in r.text.replace(" ", "")


async def test_a_batch_of_strings_and_ids_is_refused_as_vllm_serve_does(
    clients: tuple[openai.AsyncOpenAI, openai.AsyncOpenAI],
) -> None:
    for client in clients:
        with pytest.raises(openai.BadRequestError):
            await client.completions.create(model=MODEL, prompt=["Shards", [300]], max_tokens=2)  # type: ignore[list-item]
