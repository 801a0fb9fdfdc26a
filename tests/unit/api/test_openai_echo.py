"""What an answer echoes, and how its prompt's logprobs are rendered (api/openai/echo.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from shardgate.v1.params import Template

from gateway.api.openai.echo import body_with, echo_text, render
from gateway.types import GenerationRequest, Logprobs, Message, Sampling

SYSTEM, USER = Message("system", "terse"), Message("user", "Hi")
ASSISTANT = Message("assistant", "Hello and")
NO_PROMPT = Template(add_generation_prompt=False, continue_final_message=True)


def _req(echo: bool, **kw: Any) -> GenerationRequest:
    out = GenerationRequest(request_id="r", model="m", sampling=Sampling(max_tokens=4), **kw)
    out.echo = echo
    return out


@pytest.mark.parametrize(
    ("echo", "kw", "template", "want"),
    [
        (False, {"prompt": "Say"}, None, ""),
        (True, {"prompt": "Say"}, None, "Say"),
        (True, {"messages": (SYSTEM, USER)}, None, ""),  # the answer is the assistant's
        (True, {"messages": (USER, ASSISTANT)}, None, "Hello and"),
        (True, {"messages": (USER, ASSISTANT)}, NO_PROMPT, "Hello and"),
        (True, {"messages": (SYSTEM, USER)}, Template(add_generation_prompt=False), "Hi"),
        (False, {"messages": (USER, ASSISTANT)}, None, ""),
    ],
)
def test_echo_text(echo: bool, kw: dict[str, Any], template: Template | None, want: str) -> None:
    req = _req(echo, **kw)
    req.generation.template = template
    assert echo_text(req) == want


PROMPT = [
    Logprobs((1,), (), ("<s>",)),
    Logprobs((300, 7), (-2.5, -0.5), ("▁Sh", "a"), (4, 1)),
    Logprobs((9,), (float("-inf"),), ("b",), (32000,)),
]


def test_prompt_logprobs_render_as_vllm_s() -> None:
    assert render(PROMPT) == [
        None,
        {
            "300": {"logprob": -2.5, "rank": 4, "decoded_token": "▁Sh"},
            "7": {"logprob": -0.5, "rank": 1, "decoded_token": "a"},
        },
        {"9": {"logprob": -9999.0, "rank": 32000, "decoded_token": "b"}},
    ]


@pytest.mark.parametrize("chat", [True, False])
def test_a_body_gets_them_where_vllm_puts_them(chat: bool) -> None:
    body = json.dumps({"choices": [{"index": 0}], "usage": {}}).encode()
    answer = json.loads(body_with(body, chat, PROMPT))
    where = answer if chat else answer["choices"][0]
    assert where["prompt_logprobs"] == render(PROMPT)
    assert ("prompt_logprobs" in answer["choices"][0]) is not chat
