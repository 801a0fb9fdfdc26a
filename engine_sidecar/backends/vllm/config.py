"""The vLLM backend's typed configuration (a part of the sidecar's YAML, under `vllm:`).

Field names follow vLLM's engine arguments; `engine_args` passes any other argument through
unchanged (checked by vLLM when the engine starts). The model name `tiny-llama` stands for a
tiny random-weight Llama that the sidecar builds on first use (see backends/tiny_model.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
Fraction = Annotated[float, msgspec.Meta(gt=0.0, le=1.0)]


class VllmConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    model: str
    # The name clients ask for; defaults to `model`.
    served_model_name: str | None = None
    tokenizer: str | None = None
    dtype: str = "auto"
    seed: int = 0
    tensor_parallel_size: PositiveInt = 1
    pipeline_parallel_size: PositiveInt = 1
    # "mp" (one node, or several with nnodes/node_rank) or "ray"; None: vLLM chooses.
    distributed_executor_backend: str | None = None
    max_num_seqs: PositiveInt = 256
    max_num_batched_tokens: PositiveInt | None = None
    max_model_len: PositiveInt | None = None
    gpu_memory_utilization: Fraction = 0.9
    # KV cache size in bytes; set, it replaces gpu_memory_utilization (needed on CPUs).
    kv_cache_memory_bytes: PositiveInt | None = None
    block_size: PositiveInt | None = None
    enable_prefix_caching: bool = True
    # Report what the prefix cache holds on the link (vLLM's KV events, on a local socket of
    # the sidecar's), for the gateway's precise prefix routing; only with prefix caching.
    kv_events: bool = True
    enforce_eager: bool = False
    # "priority" passes request priority classes through; "fcfs" ignores them.
    scheduling_policy: Literal["priority", "fcfs"] = "priority"
    load_format: str = "auto"
    # LoRA adapters by name -> path; any set enables LoRA.
    loras: dict[str, str] = {}
    # LoRA with no adapter at start: adapters are loaded at run time (the gateway's
    # /v1/load_lora_adapter), as `vllm serve --enable-lora`.
    enable_lora: bool = False
    max_loras: PositiveInt = 1
    max_lora_rank: PositiveInt = 16
    # Any other AsyncEngineArgs field, passed through.
    engine_args: dict[str, Any] = {}
    # Environment variables set before the engine starts (HF_HUB_OFFLINE, VLLM_CPU_*...).
    env: dict[str, str] = {}
    # Where `tiny-llama` is built; default: ~/.cache/shardgate/models/tiny-llama.
    tiny_model_dir: str | None = None
    # Seconds to wait for the engine processes to exit on stop.
    shutdown_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    # Tool calls and reasoning, as `vllm serve`'s flags of the same names: tool_choice "auto"
    # needs enable_auto_tool_choice and a tool_call_parser ("pythonic", "hermes", ...: vLLM's
    # ToolParserManager); tool_parser_plugin is a file that registers more parsers;
    # reasoning_parser splits the answer's reasoning from its content.
    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None
    tool_parser_plugin: str | None = None
    reasoning_parser: str | None = None
    # As `vllm serve --trust-request-chat-template`: a request may bring its own chat template
    # (`chat_template`, or `chat_template_kwargs.chat_template`); refused by name otherwise.
    trust_request_chat_template: bool = False

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("vllm.model must not be empty")
        clash = sorted(set(self.engine_args) & set(self.__struct_fields__))
        if clash:
            raise ValueError(f"vllm.engine_args repeats typed fields: {clash}")
        if self.enable_auto_tool_choice and not self.tool_call_parser:
            raise ValueError("vllm.enable_auto_tool_choice requires vllm.tool_call_parser")

    @property
    def lora_enabled(self) -> bool:
        return self.enable_lora or bool(self.loras)

    @property
    def served_name(self) -> str:
        return self.served_model_name or self.model
