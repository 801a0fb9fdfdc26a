"""EngineRequest -> the engine server's request body (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from shardgate.v1.params import OPTIONAL, Structured

from engine_sidecar.backend import ChatMessage, Sampling
from engine_sidecar.backends.openai.body import VLLM_CAPABILITIES, request_body, sampling_fields
from tests.requests import engine_request

BASE = {"max_tokens": 8, "temperature": 1.0, "top_p": 1.0}


@pytest.mark.parametrize(
    ("sampling", "resumed", "stop", "want"),
    [
        (Sampling(max_tokens=8), 0, True, BASE),
        (Sampling(max_tokens=8, top_k=5, seed=3), 0, True, {**BASE, "top_k": 5, "seed": 3}),
        (Sampling(max_tokens=8, stop=("x",)), 0, True, {**BASE, "stop": ["x"]}),
        (Sampling(max_tokens=8, stop=("x",)), 0, False, BASE),  # applied by the sidecar
        (Sampling(max_tokens=8, ignore_eos=True), 0, True, {**BASE, "ignore_eos": True}),
        (Sampling(max_tokens=8, min_tokens=5), 2, True, {**BASE, "min_tokens": 3}),
        (Sampling(max_tokens=8, min_tokens=2), 2, True, BASE),
        (Sampling(max_tokens=8, logit_bias={7: 1.5}), 0, True, {**BASE, "logit_bias": {"7": 1.5}}),
        (Sampling(max_tokens=8, bad_words=("a",)), 0, True, {**BASE, "bad_words": ["a"]}),
        (
            Sampling(max_tokens=8, structured=Structured(field="x", json='{"type": "string"}')),
            0,
            True,
            {**BASE, "structured_outputs": {"json": {"type": "string"}}},
        ),
        (
            Sampling(max_tokens=8, structured=Structured(field="x", choice=("a", "b"))),
            0,
            True,
            {**BASE, "structured_outputs": {"choice": ["a", "b"]}},
        ),
    ],
)
def test_sampling_fields(
    sampling: Sampling, resumed: int, stop: bool, want: dict[str, Any]
) -> None:
    assert sampling_fields(sampling, 8, resumed, stop=stop) == want


def test_every_announced_field_goes_through_under_its_name() -> None:
    assert set(OPTIONAL) >= VLLM_CAPABILITIES
    values: dict[str, Any] = {
        "presence_penalty": 0.5,
        "frequency_penalty": 0.5,
        "repetition_penalty": 1.2,
        "min_p": 0.1,
        "stop_token_ids": (3,),
        "allowed_token_ids": (3, 4),
    }
    body = sampling_fields(Sampling(max_tokens=4, **values), 4, 0, stop=True)
    assert {k: body[k] for k in values} == {
        k: list(v) if isinstance(v, tuple) else v for k, v in values.items()
    }


def _request(**kw: Any) -> Any:
    return engine_request(1, request_id="r", model="m", sampling=Sampling(max_tokens=8), **kw)


@pytest.mark.parametrize(
    ("kw", "ids", "path", "prompt_key", "prompt"),
    [
        ({"prompt": "hi"}, None, "/v1/completions", "prompt", "hi"),
        ({"prompt_token_ids": (1, 2)}, None, "/v1/completions", "prompt", [1, 2]),
        (
            {"messages": (ChatMessage("user", "hi"),)},
            None,
            "/v1/chat/completions",
            "messages",
            [{"role": "user", "content": "hi"}],
        ),
        # Resumed: the prompt's ids and the generated ones, to /v1/completions.
        (
            {"messages": (ChatMessage("user", "hi"),)},
            [1, 2, 9],
            "/v1/completions",
            "prompt",
            [1, 2, 9],
        ),
    ],
)
def test_request_body(
    kw: dict[str, Any], ids: list[int] | None, path: str, prompt_key: str, prompt: Any
) -> None:
    got_path, body = request_body(
        _request(**kw), "served", 8, token_ids=True, priority=True, prompt_ids=ids
    )
    assert got_path == path
    assert body[prompt_key] == prompt
    assert body["model"] == "served"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["return_token_ids"] is True
    assert "priority" not in body  # class 0


def test_priority_lora_and_a_text_only_server() -> None:
    r = engine_request(
        1, request_id="r", model="m", sampling=Sampling(max_tokens=8), prompt="p", priority=3,
        lora="support",
    )  # fmt: skip
    _, body = request_body(r, "served", 8, token_ids=False, priority=True)
    assert body["priority"] == -3  # vLLM runs the lower number first
    assert body["model"] == "support"
    assert "return_token_ids" not in body
    _, body = request_body(r, "served", 8, token_ids=False, priority=False)
    assert "priority" not in body
