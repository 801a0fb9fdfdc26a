"""Chat template controls through the openai backend in front of a real `vllm serve`: greedy
answers equal vllm serve's own, asked directly, whether the request runs as chat on the server
or as token ids (logprobs asked: the server's /tokenize renders its conversation first)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.integration.test_openai_backend import MODEL, clients, front

__all__ = ["clients", "front"]  # (fixtures)

pytestmark = pytest.mark.timeout(600)  # may be the first to start the shared vllm serve

Clients = tuple[openai.AsyncOpenAI, openai.AsyncOpenAI]
MESSAGES: list[Any] = [
    {"role": "user", "content": "Name three shards of glass."},
    {"role": "assistant", "content": "Glass, ice and"},
]

CASES: dict[str, dict[str, Any]] = {
    "no_generation_prompt": {"add_generation_prompt": False},
    "continue_final_message": {"add_generation_prompt": False, "continue_final_message": True},
    "chat_template_kwargs": {"chat_template_kwargs": {"style": "terse"}},
    "add_special_tokens": {"add_special_tokens": True},
}


async def _answer(c: openai.AsyncOpenAI, extra: dict[str, Any], logprobs: bool) -> Any:
    r = await c.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=8,
        temperature=0.0,
        logprobs=logprobs,
        extra_body=extra,
    )
    choice = r.choices[0]
    assert r.usage is not None
    tokens = [e.token for e in choice.logprobs.content] if choice.logprobs is not None else None
    return (
        choice.message.role,
        choice.message.content,
        choice.finish_reason,
        r.usage.prompt_tokens,
        tokens,
    )


@pytest.mark.parametrize("logprobs", [False, True], ids=["chat", "token_ids"])
@pytest.mark.parametrize("case", sorted(CASES))
async def test_template_controls_answer_as_vllm_serve(
    clients: Clients, case: str, logprobs: bool
) -> None:
    ours, theirs = clients
    got = await _answer(ours, CASES[case], logprobs)
    assert got == await _answer(theirs, CASES[case], logprobs)


async def test_documents_are_refused_by_name(clients: Clients) -> None:
    ours, _ = clients
    with pytest.raises(openai.BadRequestError) as e:
        await ours.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=4,
            extra_body={"documents": [{"title": "a", "text": "b"}]},
        )
    assert isinstance(e.value.body, dict) and e.value.body["param"] == "documents"
