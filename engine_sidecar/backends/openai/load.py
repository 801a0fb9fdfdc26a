"""The server's load from its Prometheus /metrics text (pure).

vLLM: `vllm:num_requests_running`, `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc`,
counters of generated tokens, preemptions and prefix cache queries and hits, and the histogram
of tokens per engine step (its count: the engine's steps). SGLang: `sglang:num_running_reqs`,
`sglang:num_queue_reqs`, `sglang:token_usage`. Series with labels (one per engine) are summed.
"""

from __future__ import annotations

from dataclasses import dataclass

_NAMES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:generation_tokens_total": "generated_tokens",
    "vllm:num_preemptions_total": "preemptions",
    "vllm:prefix_cache_queries_total": "prefix_queries",
    "vllm:prefix_cache_hits_total": "prefix_hits",
    "vllm:iteration_tokens_total_count": "steps",
    "sglang:num_running_reqs": "running",
    "sglang:num_queue_reqs": "waiting",
    "sglang:token_usage": "kv_usage",
    "sglang:generation_tokens_total": "generated_tokens",
}


@dataclass(slots=True)
class ServerLoad:
    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    generated_tokens: int = 0
    preemptions: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    steps: int | None = None  # None: the server does not say

    @property
    def prefix_hit_rate(self) -> float:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else 0.0


def parse_metrics(text: str) -> ServerLoad:
    sums: dict[str, float] = {}
    series: dict[str, int] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name, _, rest = line.partition("{") if "{" in line else line.partition(" ")
        field = _NAMES.get(name.strip())
        if field is None:
            continue
        value = rest.rpartition("}")[2] if "{" in line else rest
        parts = value.split()
        try:
            number = float(parts[0])
        except (IndexError, ValueError):
            continue
        sums[field] = sums.get(field, 0.0) + number
        series[field] = series.get(field, 0) + 1
    load = ServerLoad()
    for field, number in sums.items():
        if field == "kv_usage":
            load.kv_usage = min(max(number / series[field], 0.0), 1.0)  # (the mean)
        else:
            setattr(load, field, int(number))
    return load
