"""VllmConfig -> vLLM engine arguments (a plain dict: no vLLM import, unit-testable)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine_sidecar.backends.tiny_model import TINY_MODEL_NAME, ensure_tiny_model
from engine_sidecar.backends.vllm.config import VllmConfig

_TYPED = (
    "tokenizer",
    "dtype",
    "seed",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "distributed_executor_backend",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "gpu_memory_utilization",
    "kv_cache_memory_bytes",
    "block_size",
    "enable_prefix_caching",
    "enforce_eager",
    "scheduling_policy",
    "load_format",
    "reasoning_parser",  # (also the engine's: structured outputs start after the reasoning)
)
# `vllm serve`'s own flags (not engine arguments) of the sidecar's `vllm:` section.
SERVER_FLAGS = ("enable_auto_tool_choice", "tool_call_parser", "tool_parser_plugin")


def resolve_model(config: VllmConfig) -> tuple[str, str]:
    """(model path, load format): `tiny-llama` is built on first use and loads random weights."""
    if config.model != TINY_MODEL_NAME:
        return config.model, config.load_format
    where = Path(config.tiny_model_dir).expanduser() if config.tiny_model_dir else None
    return str(ensure_tiny_model(where)), "dummy"


def kv_events_config(endpoint: str, replay_endpoint: str) -> dict[str, Any]:
    """vLLM's KVEventsConfig (as a dict) publishing on the sidecar's own local sockets."""
    return {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": endpoint,
        "replay_endpoint": replay_endpoint,
    }


def reports_kv(config: VllmConfig) -> bool:
    """The sidecar subscribes to the engine's KV events (unless the operator configured a
    publisher of their own in engine_args)."""
    return (
        config.kv_events
        and config.enable_prefix_caching
        and "kv_events_config" not in config.engine_args
    )


def engine_kwargs(
    config: VllmConfig,
    *,
    rank: int = 0,
    world_size: int = 1,
    kv_endpoints: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for AsyncEngineArgs; a shard group of several nodes sets nnodes;
    `kv_endpoints`: where the engine publishes its KV events (and answers replays)."""
    model, load_format = resolve_model(config)
    kwargs: dict[str, Any] = {
        name: getattr(config, name) for name in _TYPED if getattr(config, name) is not None
    }
    kwargs.update(
        model=model,
        load_format=load_format,
        served_model_name=config.served_name,
        # The sidecar reads load through its own stat logger; vLLM's periodic log stays off.
        disable_log_stats=True,
    )
    if config.lora_enabled:
        kwargs.update(enable_lora=True, max_loras=config.max_loras)
        kwargs["max_lora_rank"] = config.max_lora_rank
    if world_size > 1:
        kwargs.update(nnodes=world_size, node_rank=rank)
    if kv_endpoints is not None:
        kwargs["kv_events_config"] = kv_events_config(*kv_endpoints)
    kwargs.update(config.engine_args)
    return kwargs
