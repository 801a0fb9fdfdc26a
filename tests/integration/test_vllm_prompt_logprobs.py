"""Prompt logprobs and their refusals, compared with `vllm serve` (as test_vllm_parity.py).

vLLM gives a prompt's logprobs with a whole answer only: a text completion's in its choice,
chat's beside its choices, each prompt token's entries keyed by token id with their logprob,
rank and decoded token (the first token has none). A stream that asks for them is refused.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.integration.test_vllm_parity import GREEDY, MESSAGES, MODEL, _close
from tests.integration.vllm_cluster import VllmCluster, vllm_cluster

pytestmark = pytest.mark.timeout(900)  # may start the shared engine and vllm serve


@pytest_asyncio.fixture(scope="module")
async def served(tiny_model_dir: Path, vllm_engine: Any) -> AsyncIterator[VllmCluster]:
    async with vllm_cluster(tiny_model_dir, vllm_engine, "  default_max_tokens: 16") as c:
        yield c


@pytest.fixture
def gateway_url(served: VllmCluster) -> str:
    return served.base_url


CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "completion_0": ("completions", {"prompt": "Shards of glass", "prompt_logprobs": 0}),
    "completion_3": ("completions", {"prompt": "Shards of glass", "prompt_logprobs": 3}),
    "completion_with_logprobs": (
        "completions",
        {"prompt": "Shards", "prompt_logprobs": 1, "logprobs": 2, "echo": True},
    ),
    "chat_2": ("chat/completions", {"messages": MESSAGES, "prompt_logprobs": 2}),
    "chat_echo": (
        "chat/completions",
        {"messages": MESSAGES, "echo": True, "logprobs": True, "top_logprobs": 1},
    ),
}


def _prompt_logprobs(answer: dict[str, Any], path: str) -> Any:
    return (
        answer["prompt_logprobs"]
        if path.startswith("chat")
        else answer["choices"][0]["prompt_logprobs"]
    )


@pytest.mark.parametrize("case", sorted(CASES))
async def test_prompt_logprobs_are_vllm_serve_s(
    gateway_url: str, vllm_server: str, case: str
) -> None:
    path, fields = CASES[case]
    body = {"model": MODEL, **GREEDY, **fields}
    answers = []
    async with httpx.AsyncClient(timeout=120.0) as http:
        for base in (gateway_url, vllm_server + "/v1"):
            r = await http.post(f"{base}/{path}", json=body)
            assert r.status_code == 200, r.text
            answers.append(r.json())
    ours, theirs = answers
    assert _prompt_logprobs(ours, path) is not None
    _close(_prompt_logprobs(ours, path), _prompt_logprobs(theirs, path), case)
    for a, b in zip(ours["choices"], theirs["choices"], strict=True):
        _close(a.get("logprobs"), b.get("logprobs"), case + ".logprobs")
    _close(ours["usage"]["prompt_tokens"], theirs["usage"]["prompt_tokens"], case + ".usage")


REFUSED: dict[str, tuple[str, dict[str, Any]]] = {
    "stream": ("completions", {"prompt": "Shards", "prompt_logprobs": 1, "stream": True}),
    "chat_stream": (
        "chat/completions",
        {"messages": MESSAGES, "prompt_logprobs": 1, "stream": True},
    ),
    "negative": ("completions", {"prompt": "Shards", "prompt_logprobs": -2}),
    "truncate_too_many": ("completions", {"prompt": "Shards", "truncate_prompt_tokens": 4096}),
    "truncate_below": ("completions", {"prompt": "Shards", "truncate_prompt_tokens": -2}),
    "logprob_token_ids_without_logprobs": (
        "completions",
        {"prompt": "Shards", "logprob_token_ids": [300]},
    ),
    "chat_logprob_token_ids_without_logprobs": (
        "chat/completions",
        {"messages": MESSAGES, "logprob_token_ids": [300]},
    ),
    "logprob_token_ids_out_of_the_vocabulary": (
        "completions",
        {"prompt": "Shards", "logprobs": 1, "logprob_token_ids": [10**8]},
    ),
    "suffix": ("completions", {"prompt": "Shards", "suffix": "of glass"}),
    "truncation_side": (
        "completions",
        {"prompt": "Shards", "truncate_prompt_tokens": 1, "truncation_side": "middle"},
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
async def test_refusals_are_vllm_serve_s(gateway_url: str, vllm_server: str, case: str) -> None:
    path, fields = REFUSED[case]
    body = {"model": MODEL, **GREEDY, **fields}
    async with httpx.AsyncClient(timeout=120.0) as http:
        for base in (gateway_url, vllm_server + "/v1"):
            r = await http.post(f"{base}/{path}", json=body)
            assert r.status_code == 400, (base, r.text)


async def test_the_grpc_api_gives_the_same_prompt_logprobs_and_truncation(
    served: VllmCluster,
) -> None:
    """gateway.proto's prompt_logprobs (in the first response, with ranks) and truncation."""
    import grpc
    from shardgate.v1 import gateway_pb2 as pb
    from shardgate.v1 import gateway_pb2_grpc as pb_grpc

    fields = {"prompt": "Shards of glass cut", "prompt_logprobs": 2, "truncate_prompt_tokens": 4}
    async with httpx.AsyncClient(timeout=120.0) as http:
        r = await http.post(
            served.base_url + "/completions", json={"model": MODEL, **GREEDY, **fields}
        )
    assert r.status_code == 200, r.text
    want = r.json()["choices"][0]["prompt_logprobs"]
    req = pb.GenerateRequest(
        model=MODEL, max_tokens=GREEDY["max_tokens"], temperature=0.0, **fields
    )
    async with grpc.aio.insecure_channel(served.grpc_target) as channel:
        responses = [x async for x in pb_grpc.GatewayStub(channel).Generate(req, timeout=120)]
    got: list[Any] = []
    for pos in responses[0].prompt_logprobs:
        if not pos.entries[0].HasField("rank"):
            got.append(None)
            continue
        got.append(
            {
                str(e.token_id): {"logprob": e.logprob, "rank": e.rank, "decoded_token": e.token}
                for e in pos.entries
            }
        )
    assert len(want) == 4  # (truncated)
    _close(got, want, "grpc")
    assert not any(x.prompt_logprobs for x in responses[1:])
    assert responses[-1].usage.prompt_tokens == r.json()["usage"]["prompt_tokens"] == 4


@pytest.mark.parametrize("tokens", [[300, 301, 302], [1, 300, 301, 2]], ids=["text", "special"])
async def test_detokenize_answers_as_vllm_serve(
    gateway_url: str, vllm_server: str, tokens: list[int]
) -> None:
    answers = []
    async with httpx.AsyncClient(timeout=60.0) as http:
        for base in (gateway_url.removesuffix("/v1"), vllm_server):
            r = await http.post(base + "/detokenize", json={"model": MODEL, "tokens": tokens})
            assert r.status_code == 200, r.text
            answers.append(r.json())
    assert answers[0] == answers[1]
