"""Tool calls with a real engine, through the official openai SDK, and compared with `vllm serve`.

The tiny model's random weights never call a tool by themselves (tool_choice "auto": its parser
is tested on given output, tests/unit/backends/test_vllm_tools.py); tool_choice "required" and
a named function constrain the output to the tools' JSON schema, so the calls are valid (the
tokens of whitespace alone are biased away: the grammar allows them anywhere, and random weights
may choose them until max_tokens). For
greedy requests the gateway's answers must equal those of `vllm serve` with the same engine
arguments and `--enable-auto-tool-choice --tool-call-parser pythonic`: the calls' names and
arguments, the finish reason and the usage (tool call ids are random in both).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
import pytest_asyncio

from tests.integration.vllm_cluster import VllmCluster, vllm_cluster

pytestmark = pytest.mark.timeout(900)  # may be the first to start the engine and vllm serve

MODEL = "tiny-llama"
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "rain": {"type": "boolean"},
                },
                "required": ["unit", "rain"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {
                "type": "object",
                "properties": {"zone": {"type": "string", "enum": ["utc", "local"]}},
                "required": ["zone"],
                "additionalProperties": False,
            },
        },
    },
]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
MESSAGES: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
# A conversation with a call made and answered: the template renders both.
ANSWERED: list[Any] = [
    *MESSAGES,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call-1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"unit": "celsius"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call-1", "content": "18 degrees, dry"},
]


Served = VllmCluster


@pytest_asyncio.fixture(scope="module")
async def served(tiny_model_dir: Path, vllm_engine: Any) -> AsyncIterator[Served]:
    """The gateway in front of a sidecar of the shared engine."""
    async with vllm_cluster(tiny_model_dir, vllm_engine, "  max_body_bytes: 1048576") as c:
        yield c


@pytest_asyncio.fixture
async def client(served: Served) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=served.base_url, api_key="none", max_retries=0, timeout=120.0
    ) as c:
        yield c


_NO_BLANKS: dict[str, int] = {}


@pytest.fixture(scope="module", autouse=True)
def no_blanks(tiny_model_dir: Path) -> None:
    """A logit bias against the tokens of whitespace alone."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    blanks = [i for i in range(len(tok)) if (s := tok.decode([i])) and not s.strip()]
    assert blanks
    _NO_BLANKS.update({str(i): -100 for i in blanks})


def _request(tool_choice: Any, messages: list[Any] = MESSAGES, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": messages,
        "tools": TOOLS,
        "tool_choice": tool_choice,
        "max_tokens": 64,
        "temperature": 0.0,
        "logit_bias": _NO_BLANKS,
        **extra,
    }


def _calls_of_message(message: Any) -> list[tuple[str, str]]:
    for c in message.tool_calls or []:
        assert c.type == "function" and c.id.startswith("chatcmpl-tool-")
    return [(c.function.name, c.function.arguments) for c in message.tool_calls or []]


async def whole(c: openai.AsyncOpenAI, body: dict[str, Any]) -> dict[str, Any]:
    """What must be equal everywhere: content, calls (name, arguments), finish, usage."""
    out = await c.chat.completions.create(**body)
    choice = out.choices[0]
    assert out.usage is not None
    return {
        "content": choice.message.content,
        "calls": _calls_of_message(choice.message),
        "finish": choice.finish_reason,
        "usage": (out.usage.prompt_tokens, out.usage.completion_tokens),
    }


async def streamed(c: openai.AsyncOpenAI, body: dict[str, Any]) -> dict[str, Any]:
    """The same, from the chunks: each call's id and name in its first piece, then arguments."""
    stream = await c.chat.completions.create(
        **body, stream=True, stream_options={"include_usage": True}
    )
    content: list[str] = []
    calls: dict[int, list[str]] = {}
    finish, usage = None, None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        content.append(choice.delta.content or "")
        for d in choice.delta.tool_calls or []:
            assert d.function is not None
            if d.index not in calls:
                assert d.id is not None and d.id.startswith("chatcmpl-tool-")
                assert d.function.name is not None
                calls[d.index] = [d.function.name, ""]
            else:
                assert d.id is None and d.function.name is None
            calls[d.index][1] += d.function.arguments or ""
        finish = choice.finish_reason or finish
    return {
        "content": "".join(content),
        "calls": [(name, args) for name, args in (calls[i] for i in sorted(calls))],
        "finish": finish,
        "usage": usage,
    }


def _valid(calls: list[tuple[str, str]]) -> None:
    assert calls
    for name, arguments in calls:
        args = json.loads(arguments)
        if name == "get_weather":
            assert args["unit"] in ("celsius", "fahrenheit") and isinstance(args["rain"], bool)
        else:
            assert name == "get_time" and args == {"zone": args["zone"]}


async def test_a_named_function_is_called_with_valid_arguments(client: openai.AsyncOpenAI) -> None:
    got = await whole(client, _request(NAMED))
    _valid(got["calls"])
    assert len(got["calls"]) == 1 and got["calls"][0][0] == "get_weather"
    assert got["finish"] == "stop"  # (vLLM's, for a named function)
    assert got["content"] == ""
    assert await streamed(client, _request(NAMED)) == {**got, "content": ""}


async def test_required_calls_tools_with_valid_arguments(client: openai.AsyncOpenAI) -> None:
    got = await whole(client, _request("required", max_tokens=96))
    _valid(got["calls"])
    assert got["finish"] == "tool_calls"
    stream = await streamed(client, _request("required", max_tokens=96))
    assert stream["finish"] == "tool_calls" and stream["usage"] == got["usage"]
    # Streamed, the arguments are the model's JSON text; whole, vLLM writes them out again.
    assert [(n, json.loads(a)) for n, a in stream["calls"]] == [
        (n, json.loads(a)) for n, a in got["calls"]
    ]


async def test_parallel_tool_calls_false_makes_one_call(client: openai.AsyncOpenAI) -> None:
    got = await whole(client, _request("required", max_tokens=96, parallel_tool_calls=False))
    assert len(got["calls"]) == 1
    _valid(got["calls"])


async def test_a_conversation_with_answered_calls_is_rendered(client: openai.AsyncOpenAI) -> None:
    plain = await whole(client, _request("none"))
    answered = await whole(client, _request("none", ANSWERED))
    assert plain["calls"] == [] and answered["calls"] == []
    assert answered["usage"][0] > plain["usage"][0]


async def test_tool_choice_errors_are_400_naming_the_field(client: openai.AsyncOpenAI) -> None:
    bad = [
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tools": []}, "tools"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
    ]
    for extra, param in bad:
        with pytest.raises(openai.BadRequestError) as e:
            await client.chat.completions.create(**{**_request("auto"), **extra})
        assert isinstance(e.value.body, dict) and e.value.body["param"] == param


CASES = [
    ("required", MESSAGES),
    (NAMED, MESSAGES),
    ({"type": "function", "function": {"name": "get_time"}}, ANSWERED),
    ("none", MESSAGES),
    ("none", ANSWERED),
]


@pytest.mark.parametrize(("tool_choice", "messages"), CASES)
async def test_answers_equal_vllm_serve(
    client: openai.AsyncOpenAI,
    served: Served,
    vllm_server: str,
    tool_choice: Any,
    messages: list[Any],
) -> None:
    body = _request(tool_choice, messages, max_tokens=96)
    await served.routable()
    async with openai.AsyncOpenAI(
        base_url=vllm_server + "/v1", api_key="none", max_retries=0, timeout=120.0
    ) as reference:
        assert await whole(client, body) == await whole(reference, body)
        assert await streamed(client, body) == await streamed(reference, body)


async def test_the_grpc_api_streams_the_same_calls(
    client: openai.AsyncOpenAI, served: Served
) -> None:
    """gateway.proto carries tools, the conversation's calls and the parsed pieces."""
    import grpc
    from shardgate.v1 import gateway_pb2 as pb
    from shardgate.v1 import gateway_pb2_grpc as pb_grpc

    http = await streamed(client, _request("required", ANSWERED, max_tokens=96))
    req = pb.GenerateRequest(
        model=MODEL,
        max_tokens=96,
        temperature=0.0,
        logit_bias={int(k): v for k, v in _NO_BLANKS.items()},
        tool_choice="required",
        tools=[
            pb.Tool(
                name=t["function"]["name"],
                description=t["function"].get("description", ""),
                parameters=json.dumps(t["function"]["parameters"]),
            )
            for t in TOOLS
        ],
    )
    for m in ANSWERED:
        made = [
            pb.ToolCall(
                id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"]
            )
            for c in m.get("tool_calls", [])
        ]
        msg = req.chat.messages.add(role=m["role"], content=m["content"] or "", tool_calls=made)
        if "tool_call_id" in m:
            msg.tool_call_id = m["tool_call_id"]
    calls: dict[int, list[str]] = {}
    async with grpc.aio.insecure_channel(served.grpc_target) as channel:
        responses = [r async for r in pb_grpc.GatewayStub(channel).Generate(req, timeout=120)]
    for r in responses:
        for d in r.parsed.tool_calls:
            if d.index not in calls:
                assert d.id.startswith("chatcmpl-tool-")
                calls[d.index] = [d.name, ""]
            calls[d.index][1] += d.arguments
    last = responses[-1]
    assert [(n, a) for n, a in (calls[i] for i in sorted(calls))] == http["calls"]
    assert last.finish_reason == http["finish"] == "tool_calls"
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == http["usage"]


# The same tools as the Responses API takes them (flat, not under "function").
RESPONSE_TOOLS: list[Any] = [{"type": "function", **t["function"]} for t in TOOLS]


def _response_fields(tool_choice: Any, items: Any, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "input": items,
        "tools": RESPONSE_TOOLS,
        "tool_choice": tool_choice,
        "max_output_tokens": 64,
        "temperature": 0.0,
        "extra_body": {"logit_bias": _NO_BLANKS},
        **extra,
    }


@pytest.mark.parametrize(
    ("chat_choice", "choice"),
    [("required", "required"), (NAMED, {"type": "function", "name": "get_weather"})],
)
async def test_responses_calls_equal_chats(
    client: openai.AsyncOpenAI, chat_choice: Any, choice: Any
) -> None:
    """The Responses API's function calls are chat's, whole and streamed: the same calls
    (names, arguments) and usage, as function_call output items."""
    chat = await whole(client, _request(chat_choice))
    fields = _response_fields(choice, MESSAGES)
    r = await client.responses.create(**fields)
    calls = [(o.name, o.arguments) for o in r.output if o.type == "function_call"]
    assert calls == chat["calls"]
    _valid(calls)
    assert all(o.call_id for o in r.output if o.type == "function_call")
    assert r.usage is not None and (r.usage.input_tokens, r.usage.output_tokens) == chat["usage"]
    # Streamed, the calls are chat's streamed ones (parsed as they come).
    chat_streamed = await streamed(client, _request(chat_choice))
    stream = await client.responses.create(**fields, stream=True)
    events = [e async for e in stream]
    done = [
        (e.name, e.arguments) for e in events if e.type == "response.function_call_arguments.done"
    ]
    assert done == chat_streamed["calls"]
    last = events[-1]
    assert last.type == "response.completed"
    final = [(o.name, o.arguments) for o in last.response.output if o.type == "function_call"]
    assert final == done


async def test_responses_function_call_outputs_are_rendered_as_chats(
    client: openai.AsyncOpenAI,
) -> None:
    """A call and its output as input items: the conversation chat gets with a tool message."""
    chat = await whole(client, _request("none", ANSWERED))
    items = [
        MESSAGES[0],
        {
            "type": "function_call",
            "call_id": "call-1",
            "name": "get_weather",
            "arguments": '{"unit": "celsius"}',
        },
        {"type": "function_call_output", "call_id": "call-1", "output": "18 degrees, dry"},
    ]
    r = await client.responses.create(**_response_fields("none", items))
    assert r.output_text == chat["content"] and r.output_text
    assert r.usage is not None and (r.usage.input_tokens, r.usage.output_tokens) == chat["usage"]
