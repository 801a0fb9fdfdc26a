"""One contract suite, every backend: the `harness` fixture is parametrized over them.

The vLLM engine and the fake Triton server are shared by the session; each test gets a fresh
backend object on them (cheap), started with its own recording sink and stopped afterwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import pytest_asyncio

from engine_sidecar.backend import Backend
from tests.contract.harness import Caps, Harness
from tests.engines import TINY_MAX_MODEL_LEN, require, vllm_config

BACKENDS = ["sim", "vllm", "triton-vllm", "triton-trtllm", "openai"]
SLOTS = 4


@pytest_asyncio.fixture(scope="session")
async def fake_triton() -> AsyncIterator[Any]:
    require("tritonclient")
    from tests.contract.fake_triton import FakeTriton

    server = FakeTriton(slots=SLOTS, priority_levels=4)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir: Path) -> Any:
    require("transformers")
    from engine_sidecar.backends.common.tokenizer import HfTokenizer

    return HfTokenizer.from_pretrained(str(tiny_model_dir))


def triton_backend(server: Any, convention: str, tiny_dir: Path, **overrides: Any) -> Backend:
    from engine_sidecar.backends.triton import TritonConfig
    from engine_sidecar.backends.triton.backend import TritonBackend
    from tests.contract.fake_triton import TRTLLM_MODEL, VLLM_MODEL

    config = TritonConfig(
        url=server.url,
        model=VLLM_MODEL if convention == "vllm" else TRTLLM_MODEL,
        served_model_name="tiny-triton",
        convention=convention,  # type: ignore[arg-type]
        tokenizer=str(tiny_dir),
        max_model_len=TINY_MAX_MODEL_LEN,
        max_num_seqs=SLOTS,
        loras=["support"] if convention == "vllm" else [],
        priority_levels=4,
        health_interval_s=0.05,
        stats_interval_s=0.05,
        first_response_timeout_s=60.0,
        **{"startup_timeout_s": 10.0, **overrides},
    )
    return TritonBackend(config)


def make_harness(kind: str, request: pytest.FixtureRequest) -> Harness:
    if kind == "sim":
        from engine_sidecar.backends.sim import SimBackend, SimConfig

        # Some words split a character over two tokens, so resume is checked at such a cut.
        sim = SimConfig(
            model="sim-llama",
            max_num_seqs=SLOTS,
            max_model_len=TINY_MAX_MODEL_LEN,
            multibyte_every=4,
        )
        backend = SimBackend(sim)
        caps = Caps(logprobs=True)
        return Harness(kind, backend, "sim-llama", caps, tokenizer=backend.tokenizer)
    tiny_dir = request.getfixturevalue("tiny_model_dir")
    if kind == "vllm":
        require("vllm")
        from engine_sidecar.backends.vllm.backend import VllmBackend

        engine = request.getfixturevalue("vllm_engine")
        backend = VllmBackend(vllm_config(tiny_dir), engine=engine)
        caps = Caps(logprobs=True)
        return Harness(kind, backend, "tiny-llama", caps, tokenizer=engine.tokenizer)
    if kind == "openai":  # in front of a real `vllm serve` of the same engine
        require("vllm")
        from engine_sidecar.backends.openai import OpenAIConfig
        from engine_sidecar.backends.openai.backend import OpenAIBackend

        url = request.getfixturevalue("vllm_server")
        config = OpenAIConfig(base_url=url, model="tiny-llama", max_num_seqs=SLOTS)
        config = msgspec.structs.replace(config, health_interval_s=0.05, metrics_interval_s=0.05)
        tokenizer = request.getfixturevalue("tiny_tokenizer")
        caps = Caps(step_batches=False, logprobs=True)  # (vLLM here: decoded as vLLM does)
        return Harness(kind, OpenAIBackend(config), "tiny-llama", caps, tokenizer=tokenizer)
    server = request.getfixturevalue("fake_triton")
    convention = kind.removeprefix("triton-")
    exact = convention == "trtllm"  # token ids in and out
    # Neither applies stop strings here: trtllm refuses them, the fake vLLM model ignores them.
    caps = Caps(exact_resume=exact, token_ids=exact, step_batches=False, stop_strings=False)
    backend = triton_backend(server, convention, tiny_dir)
    tokenizer = request.getfixturevalue("tiny_tokenizer")
    return Harness(kind, backend, "tiny-triton", caps, server=server, tokenizer=tokenizer)


@pytest.fixture(params=BACKENDS)
def unstarted(request: pytest.FixtureRequest) -> Harness:
    # Synchronous, so that it may resolve the (async) session fixtures it needs on demand.
    return make_harness(request.param, request)


@pytest_asyncio.fixture
async def harness(unstarted: Harness) -> AsyncIterator[Harness]:
    h = unstarted
    await h.backend.start(h.collector.sink)
    try:
        yield h
    finally:
        await h.backend.stop()
