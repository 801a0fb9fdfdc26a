"""The OpenAI Node SDK (`openai` on npm, tests/clients/node/, installed by `make node-clients`)
against the gateway: a chat completion given whole and streamed (by hand and through the SDK's
stream helper), and a completion, as tests/clients/node/chat.mjs prints them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.clients.conftest import MAX_TOKENS, MODEL, executable, need, run_program
from tests.integration.vllm_cluster import VllmCluster

pytestmark = pytest.mark.timeout(600)  # may be the first to start the shared engine

NODE_DIR = Path(__file__).parent / "node"


def _require_sdk() -> None:
    manifest = NODE_DIR / "node_modules" / "openai" / "package.json"
    need(manifest.exists(), "the Node SDK is not installed (make node-clients installs it)")


async def test_chat_whole_and_streamed(served: VllmCluster, tmp_path: Path) -> None:
    node = executable("node")
    _require_sdk()
    argv = [node, str(NODE_DIR / "chat.mjs"), served.base_url, MODEL, str(MAX_TOKENS)]
    printed = await run_program(argv, tmp_path / "node.log", 300.0, NODE_DIR)
    out: dict[str, Any] = json.loads(printed.strip().splitlines()[-1])  # (its last line)

    whole = out["whole"]
    assert whole["object"] == "chat.completion" and whole["id"].startswith("chatcmpl-")
    assert whole["finish_reason"] == "length"
    usage = whole["usage"]
    assert usage["completion_tokens"] == MAX_TOKENS
    assert usage["total_tokens"] == usage["prompt_tokens"] + MAX_TOKENS

    streamed = out["streamed"]
    assert streamed["roles"] == ["assistant"]
    assert streamed["finish_reason"] == "length"
    assert streamed["usage"]["completion_tokens"] == MAX_TOKENS
    assert streamed["usage"]["prompt_tokens"] == usage["prompt_tokens"]
    assert streamed["chunks"] >= MAX_TOKENS
    # Greedy: the same text streamed, through the helper, or whole.
    assert streamed["content"] == whole["content"]
    assert out["helper"] == {"content": whole["content"], "finish_reason": "length"}

    completion = out["completion"]
    assert completion["object"] == "text_completion"
    assert completion["finish_reason"] == "length"
    assert completion["usage"]["completion_tokens"] == MAX_TOKENS
    assert completion["text"]
