"""The openai backend's logprobs (pure): vLLM's /v1/completions logprobs as token ids -> the
link's Logprobs entries; what goes to the server for them and for tools; refusals by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest
from shardgate.v1.params import Message, Sampling, Tools

from engine_sidecar.backend import RequestError
from engine_sidecar.backends.openai.body import request_body
from engine_sidecar.backends.openai.chunks import read_chunk
from engine_sidecar.backends.openai.job import Job
from engine_sidecar.backends.openai.local import refuse_unserved
from engine_sidecar.backends.openai.logprobs import positions, to_logprobs, token_id
from engine_sidecar.backends.openai.tokens import tokenize_body
from tests.requests import engine_request


@pytest.mark.parametrize(
    ("tokens", "token_logprobs", "top", "want"),
    [
        ([], [], [], []),
        (["token_id:5"], [-0.5], [{"token_id:5": -0.5}], [((5,), (-0.5,))]),
        (  # the sampled token among the top ones: once, first
            ["token_id:5"],
            [-0.5],
            [{"token_id:5": -0.5, "token_id:9": -1.0, "token_id:2": -2.0}],
            [((5, 9, 2), (-0.5, -1.0, -2.0))],
        ),
        (  # not among them: first, then the top ones by rank (the server's order)
            ["token_id:7", "token_id:1"],
            [-3.0, -9999.0],
            [
                {"token_id:7": -3.0, "token_id:9": -0.1, "token_id:2": -0.2},
                {"token_id:1": -9999.0, "token_id:3": -0.3},
            ],
            [((7, 9, 2), (-3.0, -0.1, -0.2)), ((1, 3), (-9999.0, -0.3))],
        ),
        (["token_id:4"], [-1.0], [None], [((4,), (-1.0,))]),
    ],
)
def test_positions(
    tokens: list[str], token_logprobs: list[float], top: list[Any], want: list[Any]
) -> None:
    assert positions(tokens, token_logprobs, top) == want


@pytest.mark.parametrize(
    ("tokens", "token_logprobs", "top"),
    [
        (["hello"], [-1.0], [{"hello": -1.0}]),  # text, not ids: ids are not known
        (["token_id:4"], [None], [None]),
        (["token_id:4"], [-1.0], []),
        (["token_id:4"], [-1.0], [{"x": -1.0}]),
    ],
)
def test_positions_refuses_what_is_not_token_ids(
    tokens: list[str], token_logprobs: list[Any], top: list[Any]
) -> None:
    with pytest.raises(ValueError):
        positions(tokens, token_logprobs, top)


def test_token_id() -> None:
    assert token_id("token_id:0") == 0 and token_id("token_id:31999") == 31999
    with pytest.raises(ValueError):
        token_id("token_id:x")


def test_to_logprobs_decodes_position_after_position() -> None:
    seen: list[list[int]] = []

    def texts(ids: list[int]) -> list[str]:
        seen.append(ids)
        return [f"t{i}" for i in ids]

    lps = to_logprobs([((5, 9), (-0.5, -1.0)), ((6,), (-0.1,))], texts)
    assert [(lp.ids, lp.logprobs, lp.tokens) for lp in lps] == [
        ((5, 9), (-0.5, -1.0), ("t5", "t9")),
        ((6,), (-0.1,), ("t6",)),
    ]
    assert seen == [[5, 9], [6]]


def test_a_chunk_s_logprobs() -> None:
    data = {
        "choices": [
            {
                "index": 0,
                "text": " a b",
                "token_ids": [5, 6],
                "logprobs": {
                    "text_offset": [0, 2],
                    "token_logprobs": [-0.5, -0.25],
                    "tokens": ["token_id:5", "token_id:6"],
                    "top_logprobs": [{"token_id:5": -0.5}, {"token_id:6": -0.25}],
                },
            }
        ]
    }
    chunk = read_chunk(json.dumps(data).encode())
    assert chunk.logprobs == [((5,), (-0.5,)), ((6,), (-0.25,))]
    data["choices"][0]["token_ids"] = [5]  # not one per token id
    with pytest.raises(msgspec.ValidationError):
        read_chunk(json.dumps(data).encode())
    data["choices"][0]["logprobs"]["tokens"] = [" a", " b"]  # (texts)
    with pytest.raises(msgspec.ValidationError):
        read_chunk(json.dumps(data).encode())


TOOLS = json.dumps([{"type": "function", "function": {"name": "f", "parameters": {}}}])


def _request(**kw: Any) -> Any:
    fields: dict[str, Any] = {"request_id": "r", "model": "m", "sampling": Sampling(max_tokens=4)}
    fields.update(kw)
    return engine_request(1, **fields)


def test_logprobs_are_asked_as_token_ids() -> None:
    r = _request(prompt="p", sampling=Sampling(max_tokens=4, logprobs=2))
    path, body = request_body(r, "m", 4, token_ids=True, priority=False, prompt_ids=[1, 2])
    assert path == "/v1/completions"
    assert (body["logprobs"], body["return_tokens_as_token_ids"]) == (2, True)
    _, plain = request_body(_request(prompt="p"), "m", 4, token_ids=True, priority=False)
    assert "return_tokens_as_token_ids" not in plain and "logprobs" not in plain


def test_a_tool_choice_s_grammar_and_special_tokens_go_to_the_server() -> None:
    schema = {"json": {"type": "array"}}
    r = _request(messages=(Message("user", "hi"),), tools=Tools(tools=TOOLS, choice="required"))
    _, body = request_body(
        r, "m", 4, token_ids=True, priority=False, prompt_ids=[1], structured=schema,
        keep_special_tokens=True,
    )  # fmt: skip
    assert body["structured_outputs"] == schema and body["skip_special_tokens"] is False
    assert "tools" not in body and body["prompt"] == [1]


def test_what_runs_as_token_ids() -> None:
    chat = {"messages": (Message("user", "hi"),)}
    assert not Job(_request(**chat), 4, 0, 0).as_ids  # to /v1/chat/completions
    assert Job(_request(**chat), 4, 2, 0).as_ids  # resumed
    assert Job(_request(**chat, sampling=Sampling(max_tokens=4, logprobs=0)), 4, 0, 0).as_ids
    assert Job(_request(**chat, tools=Tools(tools=TOOLS, choice="none")), 4, 0, 0).as_ids


def test_the_server_tokenizes_a_conversation_with_its_tools_and_calls() -> None:
    from shardgate.v1.params import ToolCall

    call = ToolCall("c1", "f", "{}")
    messages = (
        Message("user", "hi"),
        Message("assistant", "", (call,)),
        Message("tool", "done", tool_call_id="c1"),
    )
    body = tokenize_body("m", _request(messages=messages, tools=Tools(tools=TOOLS)))
    assert body["tools"] == json.loads(TOOLS)
    assert body["messages"][1]["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ]
    assert body["messages"][2]["tool_call_id"] == "c1"


def test_tools_and_logprobs_not_served_are_refused_by_name() -> None:
    tools = _request(messages=(Message("user", "hi"),), tools=Tools(tools=TOOLS))
    logprobs = _request(prompt="p", sampling=Sampling(max_tokens=4, logprobs=0))
    for r, field in [(tools, "tools"), (logprobs, "logprobs")]:
        with pytest.raises(RequestError) as e:
            refuse_unserved(r.generation, None, False)
        assert e.value.field == field
    refuse_unserved(_request(prompt="p").generation, None, False)


def test_a_tool_choice_s_grammar_as_the_server_takes_it() -> None:
    """vLLM's StructuredOutputsParams -> `structured_outputs`: each field not at its default."""
    from types import SimpleNamespace

    from tests.engines import require

    require("vllm")
    from vllm.sampling_params import StructuredOutputsParams

    from engine_sidecar.backends.openai.local import structured_outputs

    def of(so: Any) -> Any:
        chat: Any = SimpleNamespace(structured_outputs=so)
        return structured_outputs(chat)

    schema = {"type": "array", "minItems": 1}
    assert of(StructuredOutputsParams(json=schema)) == {"json": schema}
    so = StructuredOutputsParams(regex="a+", disable_any_whitespace=True)
    assert of(so) == {"regex": "a+", "disable_any_whitespace": True}
    assert of(None) is None


def test_a_resumed_request_s_token_texts_have_the_tokens_so_far_as_context(
    tiny_model_dir: Path,
) -> None:
    """A character split over byte tokens: its last token reads as the character where the
    tokens before it are the context (vLLM's convention), as the uninterrupted run read it."""
    from tests.engines import require

    require("vllm")
    from engine_sidecar.backends.common.tokenizer import HfTokenizer
    from engine_sidecar.backends.openai.local import Local

    tok = HfTokenizer.from_pretrained(str(tiny_model_dir))
    ids = tok.encode("☃", add_special_tokens=False)
    assert len(ids) == 3  # (byte tokens)
    local = Local(tok, parsers=cast(Any, None), reasoning=False)
    whole = local.token_texts([])
    run = [whole.decode([i])[0] for i in ids]
    assert run[-1] == "☃"
    assert local.token_texts(ids[:2]).decode([ids[2]]) == ["☃"]
    assert local.token_texts(ids[:1]).decode([ids[1]]) == [run[1]]


def test_the_parsers_named_as_the_server_s_flags(tiny_model_dir: Path) -> None:
    from tests.engines import require

    require("vllm")
    from engine_sidecar.backends.common.tokenizer import HfTokenizer
    from engine_sidecar.backends.openai.config import OpenAIConfig
    from engine_sidecar.backends.openai.local import make_local

    tok = HfTokenizer.from_pretrained(str(tiny_model_dir))
    flags: dict[str, Any] = {"enable_auto_tool_choice": True, "tool_call_parser": "pythonic"}
    assert make_local(OpenAIConfig(model="m", **flags), None) is None  # (no tokenizer)
    local = make_local(OpenAIConfig(model="m", **flags), tok)
    assert local is not None and not local.reasoning
    with pytest.raises(RuntimeError, match="tool_call_parser"):
        bad = {**flags, "tool_call_parser": "no-such-parser"}
        make_local(OpenAIConfig(model="m", **bad), tok)
    with pytest.raises(RuntimeError, match="think"):  # (the tiny model has no such tokens)
        make_local(OpenAIConfig(model="m", reasoning_parser="deepseek_r1"), tok)
    # tool_choice "auto" without a parser: refused by name, as vLLM's server refuses it.
    plain = make_local(OpenAIConfig(model="m"), tok)
    assert plain is not None
    r = _request(messages=(Message("user", "hi"),), tools=Tools(tools=TOOLS, choice="auto"))
    with pytest.raises(RequestError) as e:
        plain.begin(r.generation)
    assert e.value.field == "tool_choice"
