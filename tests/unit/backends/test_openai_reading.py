"""What the openai backend reads from its server (pure): chunks, /metrics, error statuses."""

from __future__ import annotations

import pytest

from engine_sidecar import config as sidecar_config
from engine_sidecar.backend import ErrorCode, Finish
from engine_sidecar.backends.openai.chunks import Chunk, finish_of, read_chunk
from engine_sidecar.backends.openai.client import refusal
from engine_sidecar.backends.openai.config import OpenAIConfig
from engine_sidecar.backends.openai.errors import status_code
from engine_sidecar.backends.openai.load import ServerLoad, parse_metrics


@pytest.mark.parametrize(
    ("data", "want"),
    [
        (
            b'{"choices":[{"index":0,"text":" a","token_ids":[5],"prompt_token_ids":[1,2],'
            b'"finish_reason":null}]}',
            Chunk(text=" a", token_ids=[5], prompt_token_ids=[1, 2]),
        ),
        (
            b'{"prompt_token_ids":[1],"choices":[{"index":0,"delta":{"role":"assistant",'
            b'"content":""},"token_ids":[]}]}',
            Chunk(text="", token_ids=[], prompt_token_ids=[1]),
        ),
        (
            b'{"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"length"}]}',
            Chunk(text="b", finish_reason="length"),
        ),
        (  # vLLM's stop_reason: the stop string that ended it
            b'{"choices":[{"index":0,"text":"","finish_reason":"stop","stop_reason":"END"}]}',
            Chunk(text="", finish_reason="stop", stop_sequence="END"),
        ),
        (  # a stop token's id, or the end of text: no stop string
            b'{"choices":[{"index":0,"text":"","finish_reason":"stop","stop_reason":2}]}',
            Chunk(text="", finish_reason="stop"),
        ),
        (
            b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop","stop_reason":null}]}',
            Chunk(text="", finish_reason="stop"),
        ),
        (
            b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,'
            b'"prompt_tokens_details":{"cached_tokens":2}}}',
            Chunk(usage=(3, 4, 2)),
        ),
        (
            b'{"error":{"message":"boom","param":"x","code":500}}',
            Chunk(error="boom", error_param="x"),
        ),
    ],
)
def test_read_chunk(data: bytes, want: Chunk) -> None:
    assert read_chunk(data) == want


@pytest.mark.parametrize(
    ("reason", "finish"),
    [("stop", Finish.STOP), ("length", Finish.LENGTH), ("tool_calls", Finish.STOP)],
)
def test_finish_of(reason: str, finish: Finish) -> None:
    assert finish_of(reason) is finish


VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:generation_tokens_total{engine="0",model_name="m"} 120.0
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 100.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 40.0
vllm:iteration_tokens_total_count{engine="0",model_name="m"} 57.0
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 999.0
"""
SGLANG_METRICS = """\
sglang:num_running_reqs{model_name="m"} 2
sglang:num_queue_reqs{model_name="m"} 5
sglang:token_usage{model_name="m"} 0.5
"""


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (VLLM_METRICS, ServerLoad(3, 1, 0.25, 120, 2, 100, 40, 57)),
        (SGLANG_METRICS, ServerLoad(2, 5, 0.5)),
        ("", ServerLoad()),
        ('vllm:num_requests_running{a="b"} nonsense\n', ServerLoad()),
        (  # two engines: counts add up, KV use is their mean
            'vllm:num_requests_running{engine="0"} 1\nvllm:num_requests_running{engine="1"} 2\n'
            'vllm:kv_cache_usage_perc{engine="0"} 0.2\nvllm:kv_cache_usage_perc{engine="1"} 0.4\n',
            ServerLoad(running=3, kv_usage=pytest.approx(0.3)),  # type: ignore[arg-type]
        ),
    ],
)
def test_parse_metrics(text: str, want: ServerLoad) -> None:
    assert parse_metrics(text) == want


def test_prefix_hit_rate() -> None:
    assert parse_metrics(VLLM_METRICS).prefix_hit_rate == 0.4
    assert ServerLoad().prefix_hit_rate == 0.0


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, ErrorCode.INVALID_ARGUMENT),
        (422, ErrorCode.INVALID_ARGUMENT),
        (404, ErrorCode.NOT_FOUND),
        (429, ErrorCode.UNAVAILABLE),
        (503, ErrorCode.UNAVAILABLE),
        (500, ErrorCode.INTERNAL),
    ],
)
def test_status_code(status: int, code: ErrorCode) -> None:
    assert status_code(status) is code


@pytest.mark.parametrize(
    ("body", "message", "param"),
    [
        (b'{"error":{"message":"too long","type":"BadRequestError","param":"prompt"}}',
         "too long", "prompt"),
        (b'{"object":"error","message":"flat","param":null}', "flat", ""),
        (b'{"detail":"x"}', "HTTP 400", ""),
        (b"not json", "not json", ""),
        (b"", "HTTP 400", ""),
    ],
)  # fmt: skip
def test_refusal(body: bytes, message: str, param: str) -> None:
    e = refusal(400, body)
    assert (e.status, e.message, e.param) == (400, message, param)


def test_config_checks() -> None:
    with pytest.raises(ValueError, match="model"):
        OpenAIConfig(model="")
    with pytest.raises(ValueError, match="base_url"):
        OpenAIConfig(model="m", base_url="127.0.0.1:8000")
    with pytest.raises(ValueError, match="command"):
        OpenAIConfig(model="m", command=[])
    with pytest.raises(ValueError, match="tool_call_parser"):
        OpenAIConfig(model="m", enable_auto_tool_choice=True)
    with pytest.raises(ValueError, match="openai"):
        sidecar_config.decode({"backend": "openai"})
    c = OpenAIConfig(model="m", base_url="http://h:1/")
    assert (c.url, c.served_name) == ("http://h:1", "m")
