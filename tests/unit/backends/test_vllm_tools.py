"""The sidecar's parse of a chat answer with vLLM's own parsers (pythonic tool calls here), on
given output: step by step as streamed, whole, and resumed at any cut (its parser is given the
text so far first, so the pieces after the cut continue the ones before it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from shardgate.v1 import parsed
from shardgate.v1.params import Generation, Message, Sampling, Tools

from tests.engines import require

OUTPUT = '[get_weather(city="Paris", unit="celsius"), get_time(zone="utc")]'
CALLS = [
    ("get_weather", {"city": "Paris", "unit": "celsius"}),
    ("get_time", {"zone": "utc"}),
]
TOOLS = json.dumps(
    [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
    ]
)
PROMPT = [5, 6, 7]


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path) -> Any:
    require("vllm")
    from engine_sidecar.backends.common.tokenizer import HfTokenizer

    return HfTokenizer.from_pretrained(str(tiny_model_dir))


def parsers(tok: Any, **config: Any) -> Any:
    from engine_sidecar.backends.vllm.config import VllmConfig
    from engine_sidecar.backends.vllm.tools import ChatParsers

    return ChatParsers(VllmConfig(model="tiny-llama", **config), tok.raw, None)


@pytest.fixture(scope="module")
def pythonic(tok: Any) -> Any:
    return parsers(tok, enable_auto_tool_choice=True, tool_call_parser="pythonic")


def generation(tools: Tools | None, whole: bool = False) -> Generation:
    return Generation(
        request_id="r",
        model="tiny-llama",
        sampling=Sampling(max_tokens=64),
        messages=(Message("user", "The weather?"),),
        tools=tools,
        parse_whole=whole,
    )


def feed(tok: Any, chat: Any, ids: list[int], done: list[int]) -> list[parsed.Parsed]:
    """Each token of `ids` as one engine step, after `done` (resumed) ones."""
    from engine_sidecar.backends.common.detokenizer import IncrementalDetokenizer

    detok = IncrementalDetokenizer(tok, [*PROMPT, *done])
    out = []
    for i, t in enumerate(ids):
        data = chat.feed(detok.add([t]), [t], i == len(ids) - 1)
        if data:
            out.append(parsed.decode(data))
    return out


def steps(tok: Any, done: list[int]) -> list[tuple[str, int]]:
    """The resumed tokens with their texts (as the backend gives them)."""
    from engine_sidecar.backends.common.detokenizer import IncrementalDetokenizer

    detok = IncrementalDetokenizer(tok, PROMPT)
    return [(detok.add([t]), t) for t in done]


def calls(p: parsed.Parsed) -> list[tuple[str | None, Any]]:
    for c in p.tool_calls:
        assert c.id is not None and c.id.startswith("chatcmpl-tool-")
    return [(c.name, json.loads(c.arguments or "")) for c in p.tool_calls]


def _shape(p: parsed.Parsed) -> list[tuple[int, str | None, str | None, bool]]:
    """The pieces without their random ids (whether each has one stays)."""
    return [(c.index, c.name, c.arguments, c.id is not None) for c in p.tool_calls]


def test_streamed_calls_come_piece_by_piece(tok: Any, pythonic: Any) -> None:
    ids = tok.encode(OUTPUT, add_special_tokens=False)
    assert tok.decode(ids) == OUTPUT
    chat = pythonic.begin(generation(Tools(tools=TOOLS)))
    chat.start(PROMPT)
    pieces = feed(tok, chat, ids, [])
    assert len(pieces) == len(ids)  # one per step, most of them empty
    assert sum(bool(p.tool_calls) for p in pieces) > 2  # the arguments come in pieces
    assert calls(parsed.merge(pieces)) == CALLS
    assert all(p.content is None for p in pieces[:-1])


def test_whole_answers_are_parsed_at_their_end(tok: Any, pythonic: Any) -> None:
    ids = tok.encode(OUTPUT, add_special_tokens=False)
    chat = pythonic.begin(generation(Tools(tools=TOOLS), whole=True))
    chat.start(PROMPT)
    [answer] = feed(tok, chat, ids, [])
    assert calls(answer) == CALLS and answer.content is None
    one = pythonic.begin(generation(Tools(tools=TOOLS, parallel_tool_calls=False), whole=True))
    one.start(PROMPT)
    assert calls(feed(tok, one, ids, [])[0]) == CALLS[:1]


def test_tool_choice_none_answers_text(tok: Any, pythonic: Any) -> None:
    ids = tok.encode(OUTPUT, add_special_tokens=False)
    for whole in (False, True):
        chat = pythonic.begin(generation(Tools(tools=TOOLS, choice="none"), whole))
        chat.start(PROMPT)
        answer = parsed.merge(feed(tok, chat, ids, []))
        assert answer.content == OUTPUT and answer.tool_calls == ()


@pytest.mark.parametrize("cut", [1, 3, 6, 9, 12, 15, -3, -2, -1])
def test_a_resumed_parse_continues_where_the_earlier_run_stopped(
    tok: Any, pythonic: Any, cut: int
) -> None:
    ids = tok.encode(OUTPUT, add_special_tokens=False)
    cut %= len(ids)
    first = pythonic.begin(generation(Tools(tools=TOOLS)))
    first.start(PROMPT)
    uninterrupted = feed(tok, first, ids, [])
    # The earlier run sent the pieces of ids[:cut]; the resumed one starts after them.
    done = ids[:cut]
    resumed = pythonic.begin(generation(Tools(tools=TOOLS)))
    resumed.start(PROMPT, steps(tok, done))
    after = feed(tok, resumed, ids[cut:], done)
    assert _shape(parsed.merge(uninterrupted[:cut] + after)) == _shape(parsed.merge(uninterrupted))
    assert calls(parsed.merge(uninterrupted[:cut] + after)) == CALLS


def test_a_resumed_whole_answer_is_parsed_with_its_earlier_text(tok: Any, pythonic: Any) -> None:
    ids = tok.encode(OUTPUT, add_special_tokens=False)
    done = ids[:7]
    chat = pythonic.begin(generation(Tools(tools=TOOLS), whole=True))
    chat.start(PROMPT, steps(tok, done))
    [answer] = feed(tok, chat, ids[7:], done)
    assert calls(answer) == CALLS


def test_a_forced_tool_choice_is_a_grammar_over_the_output(pythonic: Any) -> None:
    required = pythonic.begin(generation(Tools(tools=TOOLS, choice="required")))
    schema = required.structured_outputs.json
    assert schema["type"] == "array" and schema["minItems"] == 1 and "maxItems" not in schema
    names = [s["properties"]["name"]["enum"] for s in schema["items"]["anyOf"]]
    assert names == [["get_weather"], ["get_time"]]
    single = pythonic.begin(
        generation(Tools(tools=TOOLS, choice="required", parallel_tool_calls=False))
    )
    assert single.structured_outputs.json["maxItems"] == 1
    named = pythonic.begin(generation(Tools(tools=TOOLS, choice="function", function="get_time")))
    assert named.structured_outputs.json == {"type": "object"}
    assert pythonic.begin(generation(Tools(tools=TOOLS))).structured_outputs is None


def test_without_a_tool_parser_tool_choice_is_refused_as_vllm_does(tok: Any) -> None:
    from engine_sidecar.backend import RequestError

    plain = parsers(tok)
    assert plain.begin(generation(Tools(tools=TOOLS, choice="none"))) is None
    assert plain.begin(generation(None)) is None
    for tools, message in [
        (
            Tools(tools=TOOLS),
            '"auto" tool choice requires vllm.enable_auto_tool_choice and vllm.tool_call_parser '
            "to be set in the sidecar's config",
        ),
        (
            Tools(tools=TOOLS, choice="required"),
            'tool_choice="required" requires vllm.tool_call_parser',
        ),
        (
            Tools(tools=TOOLS, choice="function", function="get_time"),
            'tool_choice=function "get_time" requires vllm.tool_call_parser',
        ),
    ]:
        with pytest.raises(RequestError) as e:
            plain.begin(generation(tools))
        assert e.value.field == "tool_choice" and e.value.message.startswith(message)


THOUGHT = "Here is my thought process: rain is likely. Here is my response: take an umbrella."


def test_a_reasoning_parser_keeps_reasoning_apart_from_content(tok: Any) -> None:
    granite = parsers(tok, reasoning_parser="granite")  # (its markers are text)
    assert granite.reasoning
    ids = tok.encode(THOUGHT, add_special_tokens=False)
    for whole in (False, True):
        chat = granite.begin(generation(None, whole))
        assert chat is not None  # every chat answer is parsed, tools or not
        chat.start(PROMPT)
        answer = parsed.merge(feed(tok, chat, ids, []))
        assert answer.reasoning is not None and answer.content is not None
        assert "rain is likely" in answer.reasoning and "umbrella" not in answer.reasoning
        assert "take an umbrella." in answer.content and "rain" not in answer.content


def test_a_refusal_names_the_keys_of_the_sidecar_s_own_config(tok: Any) -> None:
    from engine_sidecar.backend import RequestError
    from engine_sidecar.backends.vllm.config import VllmConfig
    from engine_sidecar.backends.vllm.tools import ChatParsers

    plain = ChatParsers(
        VllmConfig(model="tiny-llama"), tok.raw, None, section="openai", sidecar="engine-a"
    )
    with pytest.raises(RequestError) as e:
        plain.begin(generation(Tools(tools=TOOLS, choice="required")))
    assert e.value.message == (
        'tool_choice="required" requires openai.tool_call_parser to be set in the config of '
        "sidecar 'engine-a'"
    )
