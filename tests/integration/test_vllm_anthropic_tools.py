"""Anthropic tool use with a real engine, through the official anthropic SDK.

The tiny model's random weights call tools only where the tool choice constrains its output
(tests/integration/test_vllm_tools.py): tool_choice "any" (chat's "required") and a named tool
(a named function), with the tokens of whitespace alone biased away (`logit_bias`, the chat
API's extension the Messages edge takes too). For greedy requests the Messages answer must be
the chat completions answer of the same conversation: its tool_use blocks the chat answer's
calls (name, the arguments' JSON as input), its stop_reason "tool_use", the same usage;
streamed, the same blocks (content_block_start tool_use, input_json_delta pieces) as given
whole. A conversation
with a call made (tool_use) and answered (tool_result) is rendered as the chat conversation
with the assistant's tool_calls and the tool message.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest
import pytest_asyncio

from tests.integration.test_vllm_tools import _NO_BLANKS, MODEL, TOOLS, Served, no_blanks, served

# The module's gateway in front of the shared engine, and the bias against blanks.
__all__ = ["no_blanks", "served"]

pytestmark = pytest.mark.timeout(900)  # may be the first to start the engine

# The chat tools as Anthropic's: name, description, input_schema.
ANTHROPIC_TOOLS: list[Any] = [
    {
        "name": t["function"]["name"],
        **({"description": t["function"]["description"]} if "description" in t["function"] else {}),
        "input_schema": t["function"]["parameters"],
    }
    for t in TOOLS
]
QUESTION = "What is the weather in Paris?"
CALLED: dict[str, Any] = {"unit": "celsius", "rain": False}
# A conversation with a call made and answered, in both APIs.
ANSWERED: list[Any] = [
    {"role": "user", "content": QUESTION},
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": CALLED}],
    },
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 degrees"}],
    },
]
CHAT_ANSWERED: list[Any] = [
    {"role": "user", "content": QUESTION},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "toolu_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps(CALLED)},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "toolu_1", "content": "18 degrees"},
]
# Anthropic's tool_choice, chat's tool_choice.
CHOICES = [
    ({"type": "any"}, "required"),
    ({"type": "tool", "name": "get_time"}, {"type": "function", "function": {"name": "get_time"}}),
]


@pytest_asyncio.fixture
async def clients(served: Served) -> AsyncIterator[tuple[anthropic.AsyncAnthropic, Any]]:
    await served.routable()
    base_url = served.base_url.removesuffix("/v1")
    async with (
        anthropic.AsyncAnthropic(base_url=base_url, api_key="none", max_retries=0) as a,
        openai.AsyncOpenAI(
            base_url=served.base_url, api_key="none", max_retries=0, timeout=120.0
        ) as o,
    ):
        yield a, o


def _args(tool_choice: Any, messages: list[Any]) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 96,
        "messages": messages,
        "tools": ANTHROPIC_TOOLS,
        "tool_choice": tool_choice,
        "extra_body": {"temperature": 0.0, "logit_bias": _NO_BLANKS},
    }


def _uses(content: list[Any]) -> list[tuple[str, Any]]:
    """The tool_use blocks' (name, input); their ids are the SDK's tool_use ids."""
    out = []
    for b in content:
        if b.type == "tool_use":
            assert b.id.startswith("toolu_") and len(b.id) > len("toolu_")
            out.append((b.name, b.input))
    return out


async def _chat(o: openai.AsyncOpenAI, tool_choice: Any, messages: list[Any]) -> dict[str, Any]:
    out = await o.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=TOOLS,
        tool_choice=tool_choice,
        max_tokens=96,
        temperature=0.0,
        logit_bias=_NO_BLANKS,
    )
    choice = out.choices[0]
    assert out.usage is not None
    return {
        "text": choice.message.content or "",
        "uses": [
            (c.function.name, json.loads(c.function.arguments))
            for c in choice.message.tool_calls or []
            if c.type == "function"
        ],
        "usage": (out.usage.prompt_tokens, out.usage.completion_tokens),
    }


def _valid(uses: list[tuple[str, Any]]) -> None:
    assert uses
    for name, args in uses:
        if name == "get_weather":
            assert args["unit"] in ("celsius", "fahrenheit") and isinstance(args["rain"], bool)
        else:
            assert name == "get_time" and args == {"zone": args["zone"]}


@pytest.mark.parametrize(("messages", "chat_messages"), [
    ([{"role": "user", "content": QUESTION}], [{"role": "user", "content": QUESTION}]),
    (ANSWERED, CHAT_ANSWERED),
])  # fmt: skip
@pytest.mark.parametrize(("tool_choice", "chat_choice"), CHOICES)
async def test_forced_tool_use_is_the_chat_answers_calls(
    clients: tuple[anthropic.AsyncAnthropic, openai.AsyncOpenAI],
    tool_choice: Any,
    chat_choice: Any,
    messages: list[Any],
    chat_messages: list[Any],
) -> None:
    a, o = clients
    chat = await _chat(o, chat_choice, chat_messages)
    m = await a.messages.create(**_args(tool_choice, messages))
    uses = _uses(m.content)
    _valid(uses)
    assert uses == chat["uses"]
    if tool_choice["type"] == "tool":
        assert [name for name, _ in uses] == ["get_time"]
    assert [b.text for b in m.content if b.type == "text"] == (
        [chat["text"]] if chat["text"] else []
    )
    assert m.stop_reason == "tool_use" and m.stop_sequence is None
    assert (m.usage.input_tokens, m.usage.output_tokens) == chat["usage"]
    counted = await a.messages.count_tokens(
        model=MODEL, messages=messages, tools=ANTHROPIC_TOOLS, tool_choice=tool_choice
    )
    assert counted.input_tokens == chat["usage"][0]


@pytest.mark.parametrize(("tool_choice", "chat_choice"), CHOICES)
async def test_a_streamed_tool_use_is_anthropics_events(
    clients: tuple[anthropic.AsyncAnthropic, openai.AsyncOpenAI],
    tool_choice: Any,
    chat_choice: Any,
) -> None:
    a, o = clients
    messages = [{"role": "user", "content": QUESTION}]
    chat = await _chat(o, chat_choice, messages)
    kinds: list[tuple[str, str]] = []
    pieces: dict[int, str] = {}
    async with a.messages.stream(**_args(tool_choice, messages)) as stream:
        async for event in stream:
            if event.type == "content_block_start":
                kinds.append((event.content_block.type, "start"))
                if event.content_block.type == "tool_use":
                    assert event.content_block.input == {}
                    pieces[event.index] = ""
            elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                pieces[event.index] += event.delta.partial_json
            elif event.type == "content_block_stop":
                kinds.append(("", "stop"))
        final = await stream.get_final_message()
    uses = _uses(final.content)
    _valid(uses)
    # Streamed, the inputs are the model's JSON text; whole, vLLM writes them out again.
    assert uses == chat["uses"]
    assert [json.loads(p) for p in pieces.values()] == [args for _, args in uses]
    assert kinds == [("tool_use", "start"), ("", "stop")] * len(uses)
    assert final.stop_reason == "tool_use"
    assert (final.usage.input_tokens, final.usage.output_tokens) == chat["usage"]


async def test_tool_choice_none_renders_the_tools_and_answers_text(
    clients: tuple[anthropic.AsyncAnthropic, openai.AsyncOpenAI],
) -> None:
    a, o = clients
    chat = await _chat(o, "none", CHAT_ANSWERED)
    m = await a.messages.create(**_args({"type": "none"}, ANSWERED))
    assert chat["uses"] == [] and _uses(m.content) == []
    assert [b.text for b in m.content if b.type == "text"] == [chat["text"]]
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert (m.usage.input_tokens, m.usage.output_tokens) == chat["usage"]


async def test_bad_tools_are_bad_request_errors_naming_the_field(
    clients: tuple[anthropic.AsyncAnthropic, openai.AsyncOpenAI],
) -> None:
    a, _ = clients
    bad = [
        ({"tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice"),
        ({"tools": [{"name": "f"}]}, "tools[0].input_schema"),
    ]
    for extra, param in bad:
        with pytest.raises(anthropic.BadRequestError) as e:
            await a.messages.create(**{**_args({"type": "any"}, ANSWERED), **extra})
        assert isinstance(e.value.body, dict)
        assert param in e.value.body["error"]["message"]
