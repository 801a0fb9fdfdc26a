"""The Anthropic SDK's AsyncAnthropic against the gateway's Messages API: a message given whole and
streamed, and tool use with tool_choice "any" and a named tool, given whole and streamed.

The tiny model's random weights call a tool only where the tool choice constrains its output to
the tools' schema (the sidecar's engine runs vLLM's pythonic tool parser with auto tool choice);
the tokens of whitespace alone are biased away, as tests/integration/test_vllm_tools.py does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.clients.conftest import MAX_TOKENS, MODEL, client_module, origin
from tests.integration.vllm_cluster import VllmCluster

pytestmark = pytest.mark.timeout(600)  # may be the first to start the shared engine

MESSAGES: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS: list[Any] = [
    {
        "name": "get_weather",
        "description": "The weather in a city.",
        "input_schema": {
            "type": "object",
            "properties": {
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "rain": {"type": "boolean"},
            },
            "required": ["unit", "rain"],
            "additionalProperties": False,
        },
    },
    {
        "name": "get_time",
        "input_schema": {
            "type": "object",
            "properties": {"zone": {"type": "string", "enum": ["utc", "local"]}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
]


@pytest_asyncio.fixture
async def client(served: VllmCluster) -> AsyncIterator[Any]:
    anthropic = client_module("anthropic")
    async with anthropic.AsyncAnthropic(
        base_url=origin(served), api_key="none", max_retries=0, timeout=120.0
    ) as c:
        yield c


@pytest.fixture(scope="module")
def no_blanks(tiny_model_dir: Path) -> dict[str, int]:
    """A logit bias against the tokens of whitespace alone."""
    tokenizer = client_module("transformers").AutoTokenizer.from_pretrained(str(tiny_model_dir))
    blanks = [i for i in range(len(tokenizer)) if (s := tokenizer.decode([i])) and not s.strip()]
    assert blanks
    return {str(i): -100 for i in blanks}


def _text_args() -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": MAX_TOKENS,
        "messages": MESSAGES,
        "extra_body": {"temperature": 0.0},
    }


async def test_message_whole_and_streamed(client: Any) -> None:
    whole = await client.messages.create(**_text_args())
    assert whole.type == "message" and whole.role == "assistant" and whole.model == MODEL
    assert whole.id.startswith("msg_")
    assert whole.stop_reason == "max_tokens"
    assert whole.usage.output_tokens == MAX_TOKENS and whole.usage.input_tokens > 0
    (block,) = whole.content
    assert block.type == "text" and block.text

    async with client.messages.stream(**_text_args()) as stream:
        events = [e.type async for e in stream]
        final = await stream.get_final_message()
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert events.count("content_block_start") == 1 and "message_delta" in events
    assert events.count("text") >= 1
    assert [b.text for b in final.content] == [block.text]
    assert final.stop_reason == "max_tokens"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (
        whole.usage.input_tokens,
        MAX_TOKENS,
    )


def _uses(message: Any) -> list[tuple[str, Any]]:
    out = []
    for b in message.content:
        if b.type == "tool_use":
            assert b.id.startswith("toolu_")
            out.append((b.name, b.input))
    return out


def _valid(uses: list[tuple[str, Any]], named: str | None) -> None:
    assert uses
    for name, args in uses:
        assert named is None or name == named
        if name == "get_weather":
            assert args["unit"] in ("celsius", "fahrenheit") and isinstance(args["rain"], bool)
        else:
            assert name == "get_time" and args["zone"] in ("utc", "local")


@pytest.mark.parametrize(
    "tool_choice",
    [{"type": "any"}, {"type": "tool", "name": "get_time"}],
    ids=["any", "tool"],
)
async def test_tool_use_whole_and_streamed(
    client: Any, no_blanks: dict[str, int], tool_choice: dict[str, str]
) -> None:
    args = {
        "model": MODEL,
        "max_tokens": 96,
        "messages": MESSAGES,
        "tools": TOOLS,
        "tool_choice": tool_choice,
        "extra_body": {"temperature": 0.0, "logit_bias": no_blanks},
    }
    named = tool_choice.get("name")
    whole = await client.messages.create(**args)
    assert whole.stop_reason == "tool_use"
    _valid(_uses(whole), named)
    assert whole.usage.output_tokens > 0

    async with client.messages.stream(**args) as stream:
        events = [e.type async for e in stream]
        final = await stream.get_final_message()
    assert "input_json" in events
    assert final.stop_reason == "tool_use"
    assert _uses(final) == _uses(whole)  # greedy: the same calls
    assert final.usage.output_tokens == whole.usage.output_tokens
