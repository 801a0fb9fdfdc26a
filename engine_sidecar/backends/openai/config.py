"""The openai backend's typed configuration (a part of the sidecar's YAML, under `openai:`)."""

from __future__ import annotations

from typing import Annotated

import msgspec

PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]


class KvEventsSource(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Where the engine server publishes its KV events (`vllm serve --kv-events-config
    '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557",
    "replay_endpoint": "tcp://*:5558"}'` with prefix caching), as this sidecar reaches them."""

    endpoint: str  # e.g. tcp://127.0.0.1:5557
    # Its replay socket: batches missed (a gap in their sequence) are asked for again; absent,
    # a gap drops what is known of the cache until it is stored again.
    replay_endpoint: str | None = None
    topic: str = ""
    # The server's KV block size (its --block-size; vLLM's default is 16 on GPUs, 128 on CPUs).
    block_size: PositiveInt
    # The longest wait for a replay's answer.
    replay_timeout_s: Seconds = 5.0

    def __post_init__(self) -> None:
        for name, value in (("endpoint", self.endpoint), ("replay_endpoint", self.replay_endpoint)):
            if value is not None and not value.startswith(("tcp://", "ipc://")):
                raise ValueError(f"openai.kv_events.{name} must be a tcp:// or ipc:// address")


class OpenAIConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    # The engine server's address, without /v1.
    base_url: str = "http://127.0.0.1:8000"
    # The model's name on the server, and the name clients ask for (default: the same).
    model: str
    served_model_name: str | None = None
    # The environment variable that holds the server's API key (sent as a Bearer token).
    api_key_env: str | None = None
    # A Hugging Face tokenizer (a directory, a hub name, or `tiny-llama`) for checking prompt
    # lengths at submit and for the text of resumed requests. Absent: the directory the server
    # names as its model's root in /v1/models, when it exists on this machine.
    tokenizer: str | None = None
    # Where `tokenizer: tiny-llama` is built; default: ~/.cache/shardgate/models/tiny-llama.
    tiny_model_dir: str | None = None
    # Absent: the server's own (/v1/models' max_model_len), else 4096.
    max_model_len: PositiveInt | None = None
    # Requests the server runs at once (its --max-num-seqs), for routing.
    max_num_seqs: PositiveInt = 256
    # LoRA adapters the server serves by name (sent as the request's model).
    loras: list[str] = []
    # Tool calls and reasoning, as the server's own flags of the same names (`vllm serve
    # --enable-auto-tool-choice --tool-call-parser pythonic`): with vLLM installed on the
    # sidecar's machine and a tokenizer, the sidecar parses a chat answer with vLLM's parsers as
    # the server would (tool_choice "required" or a named function constrains the output with
    # the schema vLLM derives from the tools, sent to the server as structured outputs).
    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None
    tool_parser_plugin: str | None = None
    reasoning_parser: str | None = None
    # The server's KV events, for the gateway's precise prefix routing (absent: the sidecar
    # reports nothing, and the gateway routes its requests on its own prefix index).
    kv_events: KvEventsSource | None = None
    # Send request priority classes (the server runs with --scheduling-policy priority).
    priority: bool = True
    # The connection pool to the server: at most this many connections at once.
    max_connections: PositiveInt = 1024
    connect_timeout_s: Seconds = 5.0
    # The longest wait for a request's first chunk (and for the one-token probe completions
    # at start), then between two chunks.
    first_chunk_timeout_s: Seconds = 60.0
    chunk_timeout_s: Seconds = 30.0
    # The whole request.
    request_timeout_s: Seconds = 600.0
    # /health, /metrics, /v1/models, /tokenize and /detokenize calls.
    rpc_timeout_s: Seconds = 5.0
    health_interval_s: Seconds = 0.5
    # One /health check: a server that takes longer has stopped answering.
    health_timeout_s: Seconds = 1.0
    metrics_interval_s: Seconds = 1.0
    # Consecutive failed health checks after which the server counts as dead (the sidecar
    # turns NOT_SERVING); one failed request stream that could not reach it counts at once.
    unhealthy_after: PositiveInt = 2
    # How long start() waits for the server to answer /health.
    startup_timeout_s: Seconds = 600.0
    # The engine server's command line, for a sidecar that runs it as its child (restarted
    # with backoff when it exits, its output logged); absent: it runs on its own.
    command: list[str] | None = None
    command_env: dict[str, str] = {}
    restart_backoff_s: Seconds = 1.0
    restart_backoff_max_s: Seconds = 30.0
    # A run this long starts the backoff again from restart_backoff_s.
    restart_reset_s: Seconds = 60.0

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("openai.model must not be empty")
        if self.command is not None and not self.command:
            raise ValueError("openai.command must not be empty")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"openai.base_url must be an http(s) URL, got {self.base_url!r}")
        if self.enable_auto_tool_choice and not self.tool_call_parser:
            raise ValueError("openai.enable_auto_tool_choice requires openai.tool_call_parser")

    @property
    def served_name(self) -> str:
        return self.served_model_name or self.model

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/")
