"""LangChain's ChatOpenAI (`langchain-openai`) against the gateway: invoke and stream, blocking and
async, with the usage it reports on its messages."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.clients.conftest import MAX_TOKENS, MODEL, client_module
from tests.integration.vllm_cluster import VllmCluster

pytestmark = pytest.mark.timeout(600)  # may be the first to start the shared engine

QUESTION = "Tell me about shards."


@pytest_asyncio.fixture
async def llm(served: VllmCluster) -> AsyncIterator[Any]:
    """ChatOpenAI on HTTP clients of the test's own, closed after it (by default it keeps its
    connections in clients shared by the process, open until it exits)."""
    lc = client_module("langchain_openai")
    httpx = client_module("httpx")
    async with httpx.AsyncClient(timeout=120.0) as aclient:
        with httpx.Client(timeout=120.0) as client:
            yield lc.ChatOpenAI(
                model=MODEL,
                base_url=served.base_url,
                api_key="none",
                max_tokens=MAX_TOKENS,
                temperature=0.0,
                max_retries=0,
                timeout=120.0,
                stream_usage=True,
                extra_body={"ignore_eos": True},
                http_client=client,
                http_async_client=aclient,
            )


def _checked(message: Any) -> tuple[str, tuple[int, int, int]]:
    """The message's text and usage (input, output, total tokens)."""
    assert message.response_metadata["finish_reason"] == "length"
    assert message.response_metadata["model_name"] == MODEL
    u = message.usage_metadata
    assert u["output_tokens"] == MAX_TOKENS
    assert u["total_tokens"] == u["input_tokens"] + MAX_TOKENS
    assert isinstance(message.content, str) and message.content
    return message.content, (u["input_tokens"], u["output_tokens"], u["total_tokens"])


def _joined(parts: list[Any]) -> Any:
    assert len(parts) >= MAX_TOKENS
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total


async def test_invoke_and_stream(llm: Any) -> None:
    def blocking() -> tuple[Any, list[Any]]:  # (its blocking client, in a worker thread)
        return llm.invoke(QUESTION), list(llm.stream(QUESTION))

    message, parts = await asyncio.to_thread(blocking)
    whole = _checked(message)
    assert message.response_metadata["id"].startswith("chatcmpl-")
    assert _checked(_joined(parts)) == whole


async def test_ainvoke_and_astream(llm: Any) -> None:
    whole = _checked(await llm.ainvoke(QUESTION))
    parts = [p async for p in llm.astream(QUESTION)]
    assert _checked(_joined(parts)) == whole
