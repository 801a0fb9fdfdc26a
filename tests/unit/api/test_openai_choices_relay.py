"""The events of a streamed request with n choices (gateway/api/openai/choices.py
`ChoicesRelay`): each choice's final step goes in its finish event, and a choice that finished
keeps that event when another choice's error ends the stream."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from gateway.api.openai.answer import Answer
from gateway.api.openai.choices import ChoicesRelay
from gateway.api.openai.sse import Tally
from gateway.types import Delta, Finish, GenerationRequest, Sampling, Unavailable, Usage


def relay(n: int) -> ChoicesRelay:
    req = GenerationRequest(request_id="r", model="m", sampling=Sampling(max_tokens=9), prompt="x")
    req.n = n
    choices: Any = SimpleNamespace(
        req=req,
        kind="completion",
        jobs=[SimpleNamespace(request=req)] * n,
        served_model="m",
        prompt_ids=None,
        tallies=[Tally() for _ in range(n)],
        answers=[Answer(None, False) for _ in range(n)],
        usage=lambda: Usage(1, 1),
        _begin=lambda buf, encs, usage: None,
    )
    return ChoicesRelay(choices, None)


def events(data: bytes) -> list[Any]:
    return [json.loads(e[6:]) for e in data.split(b"\n\n") if e.startswith(b"data: {")]


def texts(data: bytes) -> list[tuple[int, str, str | None]]:
    return [
        (c["index"], c["text"], c["finish_reason"])
        for e in events(data)
        for c in e.get("choices", ())
    ]


def test_each_choice_s_final_step_is_in_its_finish_event() -> None:
    r = relay(2)
    r.add((0, [Delta([1], "a")]))
    r.add((0, [Delta([2], "END", Finish.LENGTH, completion_tokens=2)]))
    r.add((0, []))  # (choice 0 is over)
    r.add((1, [Delta([3], "b", Finish.LENGTH, completion_tokens=1)]))
    r.add((1, []))
    r.end()
    assert texts(r.take()) == [(0, "a", None), (0, "END", "length"), (1, "b", "length")]


def test_a_finished_choice_keeps_its_final_step_when_another_fails() -> None:
    r = relay(2)
    r.add((0, [Delta([1], "FINAL", Finish.LENGTH, completion_tokens=1)]))
    # another choice's error comes before choice 0's end of choice
    r.error(Unavailable("replica lost"))
    data = r.take()
    assert texts(data) == [(0, "FINAL", "length")]
    assert b'"error"' in data and data.endswith(b"data: [DONE]\n\n")
