"""Chat template controls, prompt truncation and the logprobs of chosen tokens through the
openai backend in front of a real `vllm serve`: greedy answers equal vllm serve's own, asked
directly, whether the request runs as chat (or a text prompt) on the server or as token ids
(logprobs asked: the server's /tokenize renders its conversation first, the sidecar truncates)."""

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
    "truncate": {"truncate_prompt_tokens": 9},
    "truncate_left": {"truncate_prompt_tokens": 9, "truncation_side": "left"},
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


async def _completion(c: openai.AsyncOpenAI, extra: dict[str, Any], logprobs: int | None) -> Any:
    r = await c.completions.create(
        model=MODEL,
        prompt="Shards of glass cut the hand",
        max_tokens=8,
        temperature=0.0,
        logprobs=logprobs,
        extra_body=extra,
    )
    choice = r.choices[0]
    assert r.usage is not None
    lps = choice.logprobs.model_dump() if choice.logprobs is not None else None
    return choice.text, choice.finish_reason, r.usage.prompt_tokens, lps


COMPLETIONS: dict[str, tuple[dict[str, Any], int | None]] = {
    "truncate": ({"truncate_prompt_tokens": 3}, None),
    "truncate_left_ids": ({"truncate_prompt_tokens": 3, "truncation_side": "left"}, 0),
    "logprob_token_ids": ({"logprob_token_ids": [300, 301, 1000]}, 1),
}


def _near(a: Any, b: Any) -> None:
    if isinstance(a, float):
        assert abs(a - b) <= 1e-3, (a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b), (a, b)
        for k in a:
            _near(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), (a, b)
        for x, y in zip(a, b, strict=True):
            _near(x, y)
    else:
        assert a == b, (a, b)


@pytest.mark.parametrize("case", sorted(COMPLETIONS))
async def test_completions_answer_as_vllm_serve(clients: Clients, case: str) -> None:
    ours, theirs = clients
    extra, logprobs = COMPLETIONS[case]
    _near(await _completion(ours, extra, logprobs), await _completion(theirs, extra, logprobs))


async def test_chat_logprob_token_ids_answer_as_vllm_serve(clients: Clients) -> None:
    async def answer(c: openai.AsyncOpenAI) -> Any:
        r = await c.chat.completions.create(
            model=MODEL,
            messages=MESSAGES[:1],
            max_tokens=6,
            temperature=0.0,
            logprobs=True,
            extra_body={"logprob_token_ids": [300, 302]},
        )
        choice = r.choices[0]
        assert choice.logprobs is not None
        return choice.message.content, choice.logprobs.model_dump()

    ours, theirs = clients
    _near(await answer(ours), await answer(theirs))
