"""guidellm's benchmark against the gateway: a short run of synthetic prompts on 4 concurrent
streams, streamed on the chat endpoint and given whole on the completions endpoint; every
request succeeds with its tokens, as guidellm's JSON report counts them, and the gateway's own
metrics count the same requests. guidellm first checks the server at vLLM's `/health`, which
the gateway answers as vLLM does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

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

REQUESTS = 8


@pytest.mark.parametrize(
    ("request_format", "stream"),
    [("/v1/chat/completions", True), ("/v1/completions", False)],
)
async def test_short_benchmark_succeeds(
    served: VllmCluster, tiny_model_dir: Path, tmp_path: Path, request_format: str, stream: bool
) -> None:
    require("guidellm")
    before = await finished_requests(served)
    backend = {
        "kind": "openai_http",
        "target": origin(served),
        "model": MODEL,
        "request_format": request_format,
        "stream": stream,
    }
    report = tmp_path / "report.json"
    argv = [
        sys.executable, "-m", "guidellm", "run",
        "--backend", json.dumps(backend),
        "--profile", "kind=concurrent,streams=4",
        "--constraint", f"kind=max_requests,count={REQUESTS}",
        "--data", f"kind=synthetic_text,prompt_tokens=16,output_tokens={MAX_TOKENS}",
        "--tokenizer", f"kind=huggingface_auto,model={tiny_model_dir}",
        "--output", f"kind=json,path={report}",
        "--disable-console-interactive",
    ]  # fmt: skip
    await run_program(argv, tmp_path / "guidellm.log", 600.0, tmp_path)

    (benchmark,) = json.loads(report.read_text())["benchmarks"]
    metrics: dict[str, Any] = benchmark["metrics"]
    totals = metrics["request_totals"]
    assert (totals["successful"], totals["errored"], totals["incomplete"]) == (REQUESTS, 0, 0)
    assert benchmark["scheduler_state"]["successful_requests"] == REQUESTS
    done = benchmark["requests"]["successful"]
    assert len(done) == REQUESTS
    for r in done:
        assert r["info"]["status"] == "completed" and r["info"]["error"] is None
        assert r["output_metrics"]["text_tokens"] == MAX_TOKENS
        assert r["input_metrics"]["text_tokens"] > 0
        assert r["output"]
        sent = json.loads(r["request_args"])["body"]
        assert sent.get("stream", False) is stream
    assert metrics["output_token_count"]["successful"]["total_sum"] == REQUESTS * MAX_TOKENS
    assert metrics["request_latency"]["successful"]["count"] == REQUESTS
    if stream:  # its streaming metrics, measured on every request's chunks
        assert metrics["time_to_first_token_ms"]["successful"]["count"] == REQUESTS
        assert metrics["inter_token_latency_ms"]["successful"]["count"] > 0

    assert grown(before, await finished_requests(served)) == {"length": REQUESTS}
