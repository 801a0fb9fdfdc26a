"""Session-wide fixtures: the tiny model directory and the one shared vLLM engine."""

from __future__ import annotations

import gc
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from engine_sidecar.backends.tiny_model import ensure_tiny_model
from tests.engines import require, vllm_config
from tests.ports import free_ports
from tests.postgres_server import PostgresServer
from tests.redis_server import RedisServer


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require("tokenizers")
    return ensure_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest_asyncio.fixture(scope="session")
async def vllm_engine(tiny_model_dir: Path) -> AsyncIterator[Any]:
    """One engine for the whole session (start-up takes 15-60 s on a small CPU machine)."""
    require("vllm")
    from engine_sidecar.backends.vllm.engine import start_engine

    engine = await start_engine(vllm_config(tiny_model_dir))
    yield engine
    engine.shutdown(10.0)
    gc.collect()  # finalise the engine now, not during interpreter exit


@pytest_asyncio.fixture(scope="session")
async def vllm_server(
    tiny_model_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
    vllm_kv_events: tuple[str, str],
) -> AsyncIterator[str]:
    """A real `vllm serve` of the tiny model with the shared engine's arguments (its server
    flags too: tool choice, parsers): its base URL."""
    require("vllm")
    from tests.vllm_server import vllm_serve

    log = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    endpoint, replay = vllm_kv_events
    events = json.dumps(
        {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": endpoint.replace("127.0.0.1", "*"),
            "replay_endpoint": replay.replace("127.0.0.1", "*"),
        }
    )
    async with vllm_serve(vllm_config(tiny_model_dir), log, "--kv-events-config", events) as url:
        yield url


@pytest.fixture(scope="session")
def vllm_kv_events() -> tuple[str, str]:
    """Where the session's `vllm serve` publishes its KV events, and answers replays."""
    events, replay = free_ports(2)
    return f"tcp://127.0.0.1:{events}", f"tcp://127.0.0.1:{replay}"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the session (tests use their own key prefixes)."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the session (each test makes its own database)."""
    server = PostgresServer()
    server.start()
    yield server
    server.stop()
