"""What only the Triton backend does: server errors, cancellation on Triton, the parameters it
passes, health from readiness. Against the fake KServe v2 server, both conventions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from engine_sidecar.backend import ErrorCode, Finish
from tests.contract.conftest import triton_backend
from tests.contract.harness import Caps, Harness, eventually

pytestmark = pytest.mark.timeout(120)


@pytest_asyncio.fixture(params=["vllm", "trtllm"])
async def triton(
    request: pytest.FixtureRequest, fake_triton: Any, tiny_model_dir: Path
) -> AsyncIterator[Harness]:
    backend = triton_backend(fake_triton, request.param, tiny_model_dir)
    h = Harness(f"triton-{request.param}", backend, "tiny-triton", Caps(), server=fake_triton)
    await backend.start(h.collector.sink)
    try:
        yield h
    finally:
        fake_triton.ready = True
        await backend.stop()


def received(server: Any, key: int) -> Any:
    return next(r for r in server.received if r.id == f"contract-{key}")


async def test_a_server_error_ends_the_request_with_error(triton: Harness) -> None:
    deltas = await triton.run(max_tokens=8, request_id="fail-me")
    last = deltas[-1]
    assert last.finish is Finish.ERROR
    assert last.error_code is ErrorCode.INTERNAL
    assert "injected failure" in last.error_message
    assert last.prompt_tokens > 0


async def test_abort_cancels_the_request_on_triton(triton: Harness) -> None:
    key = triton.submit(max_tokens=400)
    await triton.collector.first(key)
    triton.backend.abort(key)
    await eventually(lambda: f"contract-{key}" in triton.server.cancelled)


async def test_priority_timeout_and_final_flag_are_sent(triton: Harness) -> None:
    key = triton.submit(max_tokens=2, priority=3)
    await triton.collector.finished(key)
    params = received(triton.server, key).parameters
    assert params["priority"].uint64_param == 1  # our class 3 of 4 levels: Triton's first
    assert params["timeout"].int64_param == 600 * 1_000_000
    assert params["triton_enable_empty_final_response"].bool_param


async def test_health_follows_server_readiness(triton: Harness) -> None:
    backend, server = triton.backend, triton.server
    assert backend.healthy() and backend.load().ready
    server.ready = False
    await eventually(lambda: not backend.healthy())
    assert not backend.load().ready
    server.ready = True
    await eventually(backend.healthy)
    await eventually(lambda: backend.load().ready)


async def test_start_fails_when_the_model_never_gets_ready(
    fake_triton: Any, tiny_model_dir: Path
) -> None:
    backend = triton_backend(fake_triton, "trtllm", tiny_model_dir, startup_timeout_s=0.3)
    fake_triton.ready = False
    try:
        with pytest.raises(RuntimeError, match="not ready"):
            await backend.start(lambda deltas: None)
    finally:
        fake_triton.ready = True


async def test_vllm_convention_sends_text_and_sampling(
    fake_triton: Any, tiny_model_dir: Path
) -> None:
    backend = triton_backend(fake_triton, "vllm", tiny_model_dir)
    h = Harness("triton-vllm", backend, "tiny-triton", Caps(), server=fake_triton)
    await backend.start(h.collector.sink)
    try:
        key = h.submit(prompt="Hello", max_tokens=3, lora="support")
        await h.collector.finished(key)
    finally:
        await backend.stop()
    inputs = {t.name: t.contents for t in received(fake_triton, key).inputs}
    assert inputs["text_input"].bytes_contents == [b"Hello"]
    assert inputs["stream"].bool_contents == [True]
    sampling = inputs["sampling_parameters"].bytes_contents[0].decode()
    assert '"max_tokens": 3' in sampling and '"lora_name": "support"' in sampling
