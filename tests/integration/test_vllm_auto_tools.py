"""tool_choice "auto" and a reasoning parser on the real engine, end to end.

The tiny model's random weights never write a call by themselves, so a regex (vLLM's structured
outputs) makes them write one: the pythonic parser then finds the calls in the output, as it
would in a real model's. The gateway's answers must equal `vllm serve`'s (started with
`--enable-auto-tool-choice --tool-call-parser pythonic`), whole and streamed. A reasoning
parser whose markers are text (granite's) splits an answer the regex writes into reasoning and
content; `include_reasoning: false` leaves the reasoning out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
import pytest_asyncio

from tests.integration.test_vllm_tools import MESSAGES, MODEL, TOOLS, streamed, whole
from tests.integration.vllm_cluster import VllmCluster, vllm_cluster

pytestmark = pytest.mark.timeout(900)  # may be the first to start the engine and vllm serve


@pytest_asyncio.fixture(scope="module")
async def served(tiny_model_dir: Path, vllm_engine: Any) -> AsyncIterator[VllmCluster]:
    async with vllm_cluster(tiny_model_dir, vllm_engine) as c:
        yield c


def _client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url, api_key="none", max_retries=0, timeout=120.0)


# What the regex makes the model write, and so what the parser finds.
WRITTEN: dict[str, str] = {
    "one_call": r"\[get_weather\(unit='celsius', rain=True\)\]",
    "two_calls": r"\[get_weather\(unit='fahrenheit', rain=False\), get_time\(zone='utc'\)\]",
    "no_call": r"[a-z]{4,8}",
}


@pytest.mark.parametrize("case", sorted(WRITTEN))
async def test_auto_tool_choice_parses_the_calls_as_vllm_serve(
    served: VllmCluster, vllm_server: str, case: str
) -> None:
    body = {
        "model": MODEL,
        "messages": MESSAGES,
        "tools": TOOLS,
        "tool_choice": "auto",
        "max_tokens": 64,
        "temperature": 0.0,
        "extra_body": {"structured_outputs": {"regex": WRITTEN[case]}},
    }
    await served.routable()
    async with _client(served.base_url) as ours, _client(vllm_server + "/v1") as theirs:
        mine = await whole(ours, body)
        assert mine == await whole(theirs, body)
        assert await streamed(ours, body) == await streamed(theirs, body)
    if case == "no_call":
        assert not mine["calls"] and mine["content"]
    else:
        assert mine["calls"] and mine["finish"] == "tool_calls"


GRANITE = r"Here is my thought process: [a-z]{3,6} Here is my response: [a-z]{3,6}"


@pytest_asyncio.fixture(scope="module")
async def reasoning(tiny_model_dir: Path, vllm_engine: Any) -> AsyncIterator[VllmCluster]:
    async with vllm_cluster(tiny_model_dir, vllm_engine, "", {"reasoning_parser": "granite"}) as c:
        yield c


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_reasoning_parser_splits_the_answer_and_include_reasoning_hides_it(
    reasoning: VllmCluster, stream: bool
) -> None:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": MESSAGES,
        "max_tokens": 48,
        "temperature": 0.0,
        "extra_body": {"structured_outputs": {"regex": GRANITE}},
    }
    await reasoning.routable()

    async def answer(c: openai.AsyncOpenAI, **extra: Any) -> tuple[str, str]:
        kwargs = {**body, "extra_body": {**body["extra_body"], **extra}}
        if not stream:
            m = (await c.chat.completions.create(**kwargs)).choices[0].message
            return m.content or "", getattr(m, "reasoning", None) or ""
        content, thought = [], []
        async for chunk in await c.chat.completions.create(**kwargs, stream=True):
            for ch in chunk.choices:
                content.append(ch.delta.content or "")
                thought.append(getattr(ch.delta, "reasoning", None) or "")
        return "".join(content), "".join(thought)

    async with _client(reasoning.base_url) as c:
        content, thought = await answer(c)
        assert thought.strip() and content.strip()
        assert "thought process" not in content and "response:" not in thought
        hidden_content, hidden_thought = await answer(c, include_reasoning=False)
    assert (hidden_content, hidden_thought) == (content, "")
