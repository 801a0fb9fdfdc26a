"""Third-party clients, used as their users use them, against one gateway in front of the session's
shared vLLM engine (the tiny random-weight Llama).

The gateway, its sidecar and the engine run on the test session's event loop; clients that are
programs (vLLM's benchmark, guidellm, Node) run as child processes awaited on it, and blocking
Python clients run in a worker thread, so the loop keeps serving meanwhile.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import shutil
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from tests.engines import require
from tests.integration.vllm_cluster import MODEL, VllmCluster, vllm_cluster

__all__ = ["MODEL"]

# Every answer is this many tokens (ignore_eos): the clients' token counts are checked on it.
MAX_TOKENS = 8
SETTINGS = "  max_body_bytes: 1048576\n  default_max_tokens: 32"
# Child processes are offline: the model and its tokenizer are local, nothing asks a hub.
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


def need(present: bool, message: str) -> None:
    """`tests.engines.require` for what is not a Python module: skip (or fail, under
    SHARDGATE_REQUIRE_ENGINES=1) when it is missing."""
    if present:
        return
    if os.environ.get("SHARDGATE_REQUIRE_ENGINES") == "1":
        pytest.fail(message)
    pytest.skip(message)


def client_module(name: str) -> ModuleType:
    """A client library, imported once it is known to be installed."""
    require(name)
    return importlib.import_module(name)


@pytest_asyncio.fixture(scope="package")
async def served(tiny_model_dir: Path, vllm_engine: Any) -> AsyncIterator[VllmCluster]:
    """The gateway in front of a sidecar of the shared engine, for every client."""
    async with vllm_cluster(tiny_model_dir, vllm_engine, SETTINGS) as c:
        await c.routable()
        yield c


def origin(served: VllmCluster) -> str:
    """The gateway's HTTP origin (no /v1)."""
    return served.base_url.removesuffix("/v1")


async def finished_requests(served: VllmCluster) -> dict[str, float]:
    """The gateway's own count of finished requests of the model, by outcome (/metrics)."""
    import httpx

    async with httpx.AsyncClient(timeout=30.0) as http:
        r = await http.get(origin(served) + "/metrics")
    r.raise_for_status()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(r.text):
        if family.name != "shardgate_requests":
            continue
        for s in family.samples:
            if s.name == "shardgate_requests_total" and s.labels.get("model") == MODEL:
                outcome = s.labels["outcome"]
                out[outcome] = out.get(outcome, 0.0) + s.value
    return out


def grown(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """The outcomes whose counts grew, and by how much."""
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


def executable(name: str) -> str:
    """The path of a program on PATH, or fail/skip naming it."""
    path = shutil.which(name)
    need(path is not None, f"{name} is not installed")
    assert path is not None
    return path


async def run_program(
    argv: list[str], log: Path, timeout_s: float, cwd: Path, env: Mapping[str, str] = OFFLINE
) -> str:
    """Run a client program to its end (stdout and stderr to `log`); fails the test on a
    non-zero exit or past `timeout_s`, with the log's tail. Returns its stdout and stderr."""
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, **env},
        )
        try:
            rc = await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            rc = None
    text = await asyncio.to_thread(log.read_text, errors="replace")
    if rc != 0:
        what = "ran past its time" if rc is None else f"exited {rc}"
        pytest.fail(f"{Path(argv[0]).name} {' '.join(argv[1:3])} {what}:\n{text[-6000:]}")
    return text
