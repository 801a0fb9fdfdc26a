"""The gRPC API's input controls on the real engine: chat template controls, special tokens and
a prompt of token ids give what the same request gives over HTTP (whose answers equal
`vllm serve`'s: test_vllm_parity.py); bad values are INVALID_ARGUMENT naming the field."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import pytest_asyncio
from shardgate.v1 import gateway_pb2 as pb
from shardgate.v1 import gateway_pb2_grpc as pb_grpc

from tests.integration.vllm_cluster import VllmCluster, vllm_cluster

pytestmark = pytest.mark.timeout(900)  # may start the shared engine

MODEL = "tiny-llama"
MESSAGES: list[dict[str, str]] = [
    {"role": "user", "content": "Name three shards of glass."},
    {"role": "assistant", "content": "Glass, ice and"},
]


@pytest_asyncio.fixture(scope="module")
async def served(tiny_model_dir: Path, vllm_engine: Any) -> AsyncIterator[VllmCluster]:
    async with vllm_cluster(tiny_model_dir, vllm_engine) as c:
        yield c


async def _grpc(served: VllmCluster, req: pb.GenerateRequest) -> tuple[str, int, int]:
    async with grpc.aio.insecure_channel(served.grpc_target) as channel:
        out = [r async for r in pb_grpc.GatewayStub(channel).Generate(req, timeout=120)]
    usage = out[-1].usage
    return "".join(r.text for r in out), usage.prompt_tokens, usage.completion_tokens


async def _http(served: VllmCluster, path: str, body: dict[str, Any]) -> tuple[str, int, int]:
    async with httpx.AsyncClient(timeout=120.0) as http:
        r = await http.post(served.base_url + path, json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    answer = r.json()
    choice = answer["choices"][0]
    text = choice["message"]["content"] if "message" in choice else choice["text"]
    return text, answer["usage"]["prompt_tokens"], answer["usage"]["completion_tokens"]


def _chat(**fields: Any) -> pb.GenerateRequest:
    req = pb.GenerateRequest(model=MODEL, max_tokens=8, temperature=0.0, **fields)
    for m in MESSAGES:
        req.chat.messages.add(role=m["role"], content=m["content"])
    return req


CHAT: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "continue_final_message": (
        {"template": pb.ChatTemplate(add_generation_prompt=False, continue_final_message=True)},
        {"add_generation_prompt": False, "continue_final_message": True},
    ),
    "no_generation_prompt": (
        {"template": pb.ChatTemplate(add_generation_prompt=False)},
        {"add_generation_prompt": False},
    ),
    "kwargs_and_documents": (
        {
            "template": pb.ChatTemplate(
                kwargs_json=json.dumps({"style": "terse"}),
                documents_json=json.dumps([{"title": "glass", "text": "Shards cut."}]),
            )
        },
        {
            "chat_template_kwargs": {"style": "terse"},
            "documents": [{"title": "glass", "text": "Shards cut."}],
        },
    ),
    "add_special_tokens": ({"add_special_tokens": True}, {"add_special_tokens": True}),
}


@pytest.mark.parametrize("case", sorted(CHAT))
async def test_chat_controls_answer_as_over_http(served: VllmCluster, case: str) -> None:
    ours, http = CHAT[case]
    body = {"messages": MESSAGES, "max_tokens": 8, "temperature": 0.0, **http}
    assert await _grpc(served, _chat(**ours)) == await _http(served, "/chat/completions", body)


async def test_a_prompt_of_token_ids_answers_as_over_http(served: VllmCluster) -> None:
    ids = [1, 300, 301, 302]
    req = pb.GenerateRequest(
        model=MODEL, max_tokens=8, temperature=0.0, prompt_token_ids=pb.TokenIds(ids=ids)
    )
    body = {"prompt": ids, "max_tokens": 8, "temperature": 0.0}
    got = await _grpc(served, req)
    assert got == await _http(served, "/completions", body)
    assert got[1] == len(ids)


REFUSED: dict[str, tuple[pb.GenerateRequest, str]] = {
    "kwargs": (_chat(template=pb.ChatTemplate(kwargs_json="[1]")), "template.kwargs_json"),
    "documents": (
        _chat(template=pb.ChatTemplate(documents_json='{"a": 1}')),
        "template.documents_json",
    ),
    "both_prompts": (
        _chat(template=pb.ChatTemplate(add_generation_prompt=True, continue_final_message=True)),
        "continue_final_message",
    ),
    "template_of_a_prompt": (
        pb.GenerateRequest(model=MODEL, prompt="x", template=pb.ChatTemplate(kwargs_json="{}")),
        "template",
    ),
    "empty_ids": (
        pb.GenerateRequest(model=MODEL, prompt_token_ids=pb.TokenIds(ids=[])),
        "prompt_token_ids",
    ),
    "negative_id": (
        pb.GenerateRequest(model=MODEL, prompt_token_ids=pb.TokenIds(ids=[5, -1])),
        "prompt_token_ids",
    ),
    "reasoning_with_logprobs": (_chat(include_reasoning=False, logprobs=1), "logprobs"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
async def test_bad_controls_are_invalid_argument_naming_the_field(
    served: VllmCluster, case: str
) -> None:
    req, field = REFUSED[case]
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await _grpc(served, req)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(e.value.trailing_metadata() or ()).get("param") == field, e.value.details()
