"""The openai backend in front of a real `vllm serve`: openai SDK -> gateway -> sidecar (backend
openai) -> vllm serve. Greedy answers equal vllm serve's own, asked directly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest
import pytest_asyncio

from engine_sidecar.backends.openai import OpenAIConfig
from engine_sidecar.backends.openai.body import PROMPT_FIELDS, TEMPLATE_CAPABILITIES
from engine_sidecar.backends.openai.load import parse_metrics
from engine_sidecar.backends.vllm.capabilities import CAPABILITIES
from engine_sidecar.config import SidecarConfig
from engine_sidecar.server import Sidecar
from gateway.app import Gateway
from gateway.config.loader import parse
from tests.contract.harness import WAIT_S, eventually
from tests.engines import require

pytestmark = pytest.mark.timeout(600)  # may be the first to start the shared vllm serve

MODEL = "tiny-llama"
MESSAGES: list[Any] = [{"role": "user", "content": "Tell me about shards."}]
# The shared vllm serve's own tool flags (tests/engines.py vllm_config): the sidecar parses as
# the server would.
SERVER_FLAGS: dict[str, Any] = {"enable_auto_tool_choice": True, "tool_call_parser": "pythonic"}
GATEWAY_YAML = """
gateway:
  max_body_bytes: 1048576
  default_max_tokens: 32
sidecars:
  - {name: openai-0, address: '127.0.0.1:%d'}
"""


class Front:
    def __init__(self, sidecar: Sidecar, gateway: Gateway, server_url: str) -> None:
        self.sidecar = sidecar
        self.gateway = gateway
        self.server_url = server_url

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway.http_port}/v1"


@pytest_asyncio.fixture(scope="module")
async def front(vllm_server: str) -> AsyncIterator[Front]:
    require("vllm")
    # (patient health checks: a server busy on this machine's two cores may be slow to answer
    # /health, and these tests are not about its health: test_openai_backend_faults.py is)
    backend = OpenAIConfig(
        base_url=vllm_server,
        model=MODEL,
        max_num_seqs=4,
        health_timeout_s=5.0,
        unhealthy_after=4,
        **SERVER_FLAGS,
    )
    config = SidecarConfig(name="openai-0", port=0, backend="openai", openai=backend)
    sidecar = Sidecar(config)
    await sidecar.start()
    gateway = Gateway(parse(GATEWAY_YAML % sidecar.port), http_port=0, grpc_port=0)
    await gateway.start()
    try:
        assert await gateway.fleet.wait_connected(30.0), "the sidecar did not connect"
        yield Front(sidecar, gateway, vllm_server)
    finally:
        await gateway.stop(1.0)
        await sidecar.stop(1.0)


def _client(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=120.0)


@pytest_asyncio.fixture
async def clients(front: Front) -> AsyncIterator[tuple[openai.AsyncOpenAI, openai.AsyncOpenAI]]:
    async with _client(front.base_url) as ours, _client(front.server_url + "/v1") as theirs:
        yield ours, theirs


def _usage(u: Any) -> tuple[int, int, int]:
    assert u is not None
    return (u.prompt_tokens, u.completion_tokens, u.total_tokens)


async def _chat(c: openai.AsyncOpenAI, stream: bool, **kw: Any) -> tuple[str, str, Any]:
    if not stream:
        r = await c.chat.completions.create(model=MODEL, messages=MESSAGES, **kw)
        return r.choices[0].message.content or "", r.choices[0].finish_reason, _usage(r.usage)
    s = await c.chat.completions.create(
        model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True}, **kw
    )
    parts, finish, usage = [], "", None
    async for chunk in s:
        if chunk.usage is not None:
            usage = _usage(chunk.usage)
        for choice in chunk.choices:
            parts.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    return "".join(parts), finish, usage


async def _complete(c: openai.AsyncOpenAI, stream: bool, **kw: Any) -> tuple[str, str, Any]:
    prompt = "The gateway routes shards"
    if not stream:
        r = await c.completions.create(model=MODEL, prompt=prompt, **kw)
        return r.choices[0].text, r.choices[0].finish_reason, _usage(r.usage)
    s = await c.completions.create(
        model=MODEL, prompt=prompt, stream=True, stream_options={"include_usage": True}, **kw
    )
    parts, finish, usage = [], "", None
    async for chunk in s:
        if chunk.usage is not None:
            usage = _usage(chunk.usage)
        for choice in chunk.choices:
            parts.append(choice.text)
            finish = choice.finish_reason or finish
    return "".join(parts), finish, usage


CASES = [
    {"max_tokens": 16, "extra_body": {"ignore_eos": True}},
    {"max_tokens": 48},  # may end on the end-of-text token: a "stop"
    {"max_tokens": 24, "stop": ["P S", "dso"]},  # (each ends one of the endpoints' answers)
    {"max_tokens": 12, "seed": 7, "temperature": 0.8},
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("endpoint", ["chat", "completions"])
async def test_answers_equal_vllm_serve_s_own(
    clients: tuple[openai.AsyncOpenAI, openai.AsyncOpenAI], endpoint: str, case: int, stream: bool
) -> None:
    ours, theirs = clients
    ask = _chat if endpoint == "chat" else _complete
    kw = {"temperature": 0.0, **CASES[case]}
    want = await ask(theirs, stream, **kw)
    got = await ask(ours, stream, **kw)
    assert got == want
    assert want[2][1] > 0
    if "stop" in kw:
        assert want[1] == "stop"


async def _server_load(front: Front) -> Any:
    async with aiohttp.ClientSession() as http, http.get(front.server_url + "/metrics") as r:
        return parse_metrics(await r.text())


async def _server_running(front: Front, n: int, made_below: int | None = None) -> Any:
    """The server's load once `n` requests run there, read from its /metrics each time (the
    sidecar's own copy is a scrape a second); fails once it has made `made_below` tokens."""
    async with asyncio.timeout(WAIT_S):
        while (load := await _server_load(front)).running != n:
            assert made_below is None or load.generated_tokens < made_below, "all were made"
            await asyncio.sleep(0.02)
    return load


async def test_a_client_gone_aborts_the_request_on_the_server(
    front: Front, clients: tuple[openai.AsyncOpenAI, openai.AsyncOpenAI]
) -> None:
    ours, _ = clients
    before = (await _server_running(front, 0)).generated_tokens
    stream = await ours.chat.completions.create(
        model=MODEL, messages=MESSAGES, stream=True, max_tokens=400, extra_body={"ignore_eos": True}
    )
    async for _ in stream:
        break
    await _server_running(front, 1, made_below=before + 400)  # (the server may be quick)
    await stream.close()
    await eventually(lambda: front.sidecar.hub.inflight == 0)
    after = await _server_running(front, 0)
    assert after.generated_tokens - before < 400  # the server stopped it: not all were made


async def test_the_sidecar_announces_what_the_server_takes(front: Front) -> None:
    info = front.sidecar.backend.info()
    assert info.backend == "openai"
    assert [m.name for m in info.models] == [MODEL]
    assert info.models[0].max_model_len == 512  # the server's own
    # The vllm backend's, less the chat template controls: logprobs and tools too (made on the
    # sidecar, with vLLM here: test_openai_backend_parsed.py).
    assert info.capabilities == (CAPABILITIES - PROMPT_FIELDS) | TEMPLATE_CAPABILITIES | {"tools"}
    assert "documents" not in info.capabilities
    assert front.sidecar.backend.load().ready


async def test_sampling_fields_reach_the_server(
    clients: tuple[openai.AsyncOpenAI, openai.AsyncOpenAI],
) -> None:
    ours, theirs = clients
    kw: dict[str, Any] = {"max_tokens": 6, "temperature": 0.0}
    kw["extra_body"] = {"ignore_eos": True, "allowed_token_ids": [300, 301], "min_p": 0.1}
    got, want = await _complete(ours, False, **kw), await _complete(theirs, False, **kw)
    assert got == want
    plain = await _complete(ours, False, max_tokens=6, temperature=0.0)
    assert got[0] != plain[0]


async def test_tokenize_through_the_server(front: Front) -> None:
    base = front.base_url.removesuffix("/v1")
    async with aiohttp.ClientSession() as http:
        body = {"model": MODEL, "messages": MESSAGES}
        async with http.post(f"{base}/tokenize", json=body) as r:
            assert r.status == 200
            ours = await r.json()
        async with http.post(f"{front.server_url}/tokenize", json=body) as r:
            theirs = await r.json()
        assert ours["tokens"] == theirs["tokens"]
        tokens = {"model": MODEL, "tokens": theirs["tokens"]}
        async with http.post(f"{base}/detokenize", json=tokens) as r:
            assert r.status == 200
            text = (await r.json())["prompt"]
        async with http.post(f"{front.server_url}/detokenize", json=tokens) as r:
            assert text == (await r.json())["prompt"]


async def test_the_stop_string_that_ended_it_is_named(
    front: Front, clients: tuple[openai.AsyncOpenAI, openai.AsyncOpenAI]
) -> None:
    """vLLM's stop_reason (the stop string it matched) is the final delta's stop sequence:
    Anthropic's Messages API names it (stop_reason "stop_sequence"), as with the vllm backend."""
    import anthropic

    ours, _ = clients
    reference, finish, _ = await _chat(ours, False, max_tokens=24, temperature=0.0)
    assert finish == "length" and len(reference) >= 8
    stop = reference[4:8]
    base_url = front.base_url.removesuffix("/v1")
    async with anthropic.AsyncAnthropic(base_url=base_url, api_key="none", max_retries=0) as a:
        args: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 24,
            "messages": MESSAGES,
            "stop_sequences": ["never appears here", stop],
            "extra_body": {"temperature": 0.0},
        }
        m = await a.messages.create(**args)
        assert (m.stop_reason, m.stop_sequence) == ("stop_sequence", stop)
        assert [getattr(b, "text", None) for b in m.content] == [reference[: reference.index(stop)]]
        async with a.messages.stream(**args) as stream:
            final = await stream.get_final_message()
        assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", stop)
        # Ended by its length: no stop sequence.
        m = await a.messages.create(**{**args, "stop_sequences": ["never appears here"]})
        assert (m.stop_reason, m.stop_sequence) == ("max_tokens", None)
