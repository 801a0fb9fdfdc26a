"""Logprobs and tool calls through the openai backend in front of a real `vllm serve`: openai SDK
-> gateway -> sidecar (backend openai, vLLM on its machine) -> vllm serve. Greedy answers equal
vllm serve's own, asked directly: the logprobs (to 1e-3) and their tokens' texts, the tool
calls, finish reasons and usage; and a resumed request's logprobs go on exactly."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
import pytest_asyncio
from shardgate.v1.params import Logprobs, Message, Sampling, Tools

from engine_sidecar.backends.common.tokenizer import HfTokenizer
from engine_sidecar.backends.openai import OpenAIConfig
from engine_sidecar.backends.openai.backend import OpenAIBackend
from tests.contract.harness import Collector
from tests.integration.test_openai_backend import (
    MESSAGES,
    MODEL,
    SERVER_FLAGS,
    clients,
    front,
)
from tests.integration.test_vllm_tools import (
    ANSWERED,
    NAMED,
    TOOLS,
    _request,
    no_blanks,
    streamed,
    whole,
)
from tests.integration.test_vllm_tools import MESSAGES as ASKED
from tests.requests import engine_request

__all__ = ["clients", "front", "no_blanks"]  # (fixtures)

pytestmark = pytest.mark.timeout(600)  # may be the first to start the shared vllm serve

Clients = tuple[openai.AsyncOpenAI, openai.AsyncOpenAI]
TOLERANCE = 1e-3


def _close(got: Any, want: Any, where: str = "") -> None:
    """Equal, floats to TOLERANCE (texts, ids, finish reasons and usage exactly)."""
    if isinstance(want, float):
        assert isinstance(got, float) and abs(got - want) <= TOLERANCE, (where, got, want)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), (where, got, want)
        for k in want:
            _close(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list | tuple):
        assert isinstance(got, list | tuple) and len(got) == len(want), (where, got, want)
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _close(g, w, f"{where}[{i}]")
    else:
        assert got == want, (where, got, want)


def _chat_entries(content: Any) -> list[Any]:
    return [
        (
            e.token,
            e.bytes,
            e.logprob,
            [(t.token, t.bytes, t.logprob) for t in e.top_logprobs],
        )
        for e in content or []
    ]


async def chat_logprobs(c: openai.AsyncOpenAI, stream: bool, **kw: Any) -> dict[str, Any]:
    args = {"model": MODEL, "messages": MESSAGES, "temperature": 0.0, "logprobs": True, **kw}
    if not stream:
        r = await c.chat.completions.create(**args)
        choice = r.choices[0]
        assert r.usage is not None and choice.logprobs is not None
        return {
            "text": choice.message.content,
            "finish": choice.finish_reason,
            "usage": (r.usage.prompt_tokens, r.usage.completion_tokens),
            "logprobs": _chat_entries(choice.logprobs.content),
        }
    s = await c.chat.completions.create(**args, stream=True, stream_options={"include_usage": True})
    text, finish, usage, entries = "", None, None, []
    async for chunk in s:
        if chunk.usage is not None:
            usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
            if choice.logprobs is not None:
                entries += _chat_entries(choice.logprobs.content)
    return {"text": text, "finish": finish, "usage": usage, "logprobs": entries}


async def completion_logprobs(c: openai.AsyncOpenAI, stream: bool, **kw: Any) -> dict[str, Any]:
    args = {"model": MODEL, "prompt": "The gateway routes shards", "temperature": 0.0, **kw}
    out: dict[str, Any] = {"text": "", "finish": None, "usage": None}
    lists: dict[str, list[Any]] = {
        "tokens": [],
        "token_logprobs": [],
        "top_logprobs": [],
        "text_offset": [],
    }
    if stream:
        args.update(stream=True, stream_options={"include_usage": True})
    answer = await c.completions.create(**args)
    chunks = [chunk async for chunk in answer] if stream else [answer]
    for chunk in chunks:
        if chunk.usage is not None:
            out["usage"] = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        for choice in chunk.choices:
            out["text"] += choice.text
            out["finish"] = choice.finish_reason or out["finish"]
            if choice.logprobs is not None:
                for name, values in lists.items():
                    values += getattr(choice.logprobs, name) or []
    return out | lists


LOGPROB_CASES = [
    {"max_tokens": 24, "extra_body": {"ignore_eos": True}},
    {"max_tokens": 40},  # (may end on the end-of-text token)
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("top", [0, 3])
@pytest.mark.parametrize("case", range(len(LOGPROB_CASES)))
async def test_chat_logprobs_equal_vllm_serve_s_own(
    clients: Clients, stream: bool, top: int, case: int
) -> None:
    ours, theirs = clients
    kw = {"top_logprobs": top, **LOGPROB_CASES[case]}
    want = await chat_logprobs(theirs, stream, **kw)
    got = await chat_logprobs(ours, stream, **kw)
    assert want["logprobs"] and len(want["logprobs"]) == want["usage"][1]
    assert all(len(e[3]) == top for e in want["logprobs"])
    _close(got, want)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("top", [0, 3])
@pytest.mark.parametrize("case", range(len(LOGPROB_CASES)))
async def test_completion_logprobs_equal_vllm_serve_s_own(
    clients: Clients, stream: bool, top: int, case: int
) -> None:
    ours, theirs = clients
    kw = {"logprobs": top, **LOGPROB_CASES[case]}
    want = await completion_logprobs(theirs, stream, **kw)
    got = await completion_logprobs(ours, stream, **kw)
    assert want["tokens"] and len(want["tokens"]) == want["usage"][1]
    _close(got, want)


TOOL_CASES = [
    ("required", ASKED),
    (NAMED, ASKED),
    ({"type": "function", "function": {"name": "get_time"}}, ANSWERED),
    ("none", ANSWERED),
]


@pytest.mark.parametrize(("tool_choice", "messages"), TOOL_CASES)
async def test_tool_calls_equal_vllm_serve_s_own(
    clients: Clients, tool_choice: Any, messages: list[Any]
) -> None:
    """Names, arguments, content, finish reason ("tool_calls" for "required") and usage, whole
    and streamed (tool call ids are random in both)."""
    ours, theirs = clients
    body = _request(tool_choice, messages, max_tokens=96)
    want = await whole(theirs, body)
    assert (want["calls"] != []) == (tool_choice != "none")
    assert await whole(ours, body) == want
    assert await streamed(ours, body) == await streamed(theirs, body)


def _request_of(key: int, resumed: tuple[int, ...], **fields: Any) -> Any:
    sampling = Sampling(max_tokens=12, temperature=0.0, ignore_eos=True, logprobs=3)
    return engine_request(key, resumed, model=MODEL, request_id="t", sampling=sampling, **fields)


def _logprobs(deltas: list[Any]) -> list[Logprobs]:
    return [lp for d in deltas for lp in d.logprobs or []]


@pytest_asyncio.fixture
async def backend(vllm_server: str) -> AsyncIterator[tuple[OpenAIBackend, Collector]]:
    """The backend alone in front of the server (its deltas collected)."""
    config = OpenAIConfig(base_url=vllm_server, model=MODEL, **SERVER_FLAGS)
    b, c = OpenAIBackend(config), Collector()
    await b.start(c.sink)
    try:
        yield b, c
    finally:
        await b.stop()


@pytest.mark.parametrize("what", ["chat", "prompt", "tools"])
async def test_a_resumed_request_s_logprobs_go_on_exactly(
    backend: tuple[OpenAIBackend, Collector], what: str
) -> None:
    """The sidecar's side of a resume (preemption, migration): the tokens after those resumed,
    with the same logprobs and token texts as the uninterrupted run's."""
    b, c = backend
    fields: dict[str, Any] = {"prompt": "The gateway routes shards"}
    if what != "prompt":
        fields = {"messages": (Message("user", "Tell me about shards."),)}
    if what == "tools":
        fields["tools"] = Tools(tools=json.dumps(TOOLS), choice="auto")
    b.submit(_request_of(1, (), **fields))
    full = await c.finished(1)
    ids = [t for d in full for t in d.token_ids]
    assert len(ids) == len(_logprobs(full)) == 12
    b.submit(_request_of(2, tuple(ids[:5]), **fields))
    resumed = await c.finished(2)
    assert [t for d in resumed for t in d.token_ids] == ids[5:]
    want = _logprobs(full)[5:]
    got = _logprobs(resumed)
    _close(
        [(lp.ids, lp.tokens, lp.logprobs) for lp in got],
        [(lp.ids, lp.tokens, lp.logprobs) for lp in want],
    )
    assert all(lp.ids[0] == t for lp, t in zip(got, ids[5:], strict=True))
    assert (resumed[-1].prompt_tokens, resumed[-1].completion_tokens) == (
        full[-1].prompt_tokens,
        12,
    )


async def test_a_resumed_token_that_ends_a_character_reads_as_that_character(
    backend: tuple[OpenAIBackend, Collector], tiny_model_dir: Path
) -> None:
    """Resumed after two of a character's three byte tokens, the third (forced here) reads as
    the character, as in the run that made all three: the tokens so far are its context."""
    b, c = backend
    tokenizer = HfTokenizer.from_pretrained(str(tiny_model_dir))
    snowman = tuple(tokenizer.encode("☃", add_special_tokens=False))
    assert len(snowman) == 3
    sampling = Sampling(max_tokens=3, temperature=0.0, logprobs=2, allowed_token_ids=snowman[2:])
    b.submit(
        engine_request(
            1, snowman[:2], model=MODEL, request_id="t", sampling=sampling, prompt="Snow"
        )
    )
    deltas = await c.finished(1)
    lps = _logprobs(deltas)
    assert [lp.ids[0] for lp in lps] == [snowman[2]]
    assert lps[0].tokens[0] == "☃"
    assert "".join(d.text for d in deltas) == "☃"
