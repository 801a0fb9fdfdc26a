"""The Triton backend's typed configuration (a part of the sidecar's YAML, under `triton:`).

Two model conventions are spoken:
- `vllm`: Triton's vLLM backend (`text_input`, `stream`, `sampling_parameters` JSON ->
  `text_output`). Text in, text out; a tokenizer, if given, renders chat messages and token ids.
- `trtllm`: TensorRT-LLM (`input_ids`, `input_lengths`, `request_output_len`, `streaming` ->
  `output_ids`). Token ids in and out, so a resumed request continues exactly; it needs the
  model's tokenizer (a Hugging Face directory, or `tiny-llama`).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]


class TritonConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    url: str = "127.0.0.1:8001"
    # The model's name on Triton, and the name clients ask for (default: the same).
    model: str
    served_model_name: str | None = None
    model_version: str = ""
    convention: Literal["vllm", "trtllm"] = "vllm"
    tokenizer: str | None = None
    max_model_len: PositiveInt = 4096
    # Requests the model runs at once; the load report counts the rest as waiting.
    max_num_seqs: PositiveInt = 256
    # LoRA adapters the model serves (vllm convention: sent as `lora_name`).
    loras: list[str] = []
    # Triton's priority levels of the model (1 runs first); 0: priority is not sent.
    priority_levels: Annotated[int, msgspec.Meta(ge=0)] = 0
    # The whole request, passed to Triton as its timeout and used as the stream's deadline.
    request_timeout_s: Seconds = 600.0
    # The longest wait for a request's first response, then between two responses.
    first_response_timeout_s: Seconds = 60.0
    response_timeout_s: Seconds = 30.0
    # How long start() waits for the server and the model to be ready.
    startup_timeout_s: Seconds = 600.0
    # Health and statistics calls.
    rpc_timeout_s: Seconds = 5.0
    health_interval_s: Seconds = 1.0
    stats_interval_s: Seconds = 5.0
    # Consecutive failed readiness checks after which the engine counts as dead.
    unhealthy_after: PositiveInt = 3
    # vllm convention: ask for num_input_tokens, num_output_tokens and finish_reason
    # (Triton's vLLM backend r24.12 or later).
    additional_outputs: bool = True
    # Where `tokenizer: tiny-llama` is built; default: ~/.cache/shardgate/models/tiny-llama.
    tiny_model_dir: str | None = None

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("triton.model must not be empty")
        if self.convention == "trtllm":
            if not self.tokenizer:
                raise ValueError("triton.tokenizer is required by the trtllm convention")
            if self.loras:
                raise ValueError("triton.loras: the trtllm convention serves no LoRA by name")

    @property
    def served_name(self) -> str:
        return self.served_model_name or self.model
