"""The contract between the sidecar's servicer and an engine backend.

A backend owns one engine. The servicer hands it requests with `submit` (synchronous
validation: a bad request raises `RequestError` at once) and `abort`; the backend pushes every
engine step's output to the sink given to `start`, as ONE list holding the deltas of all
requests that advanced in that step. The sink never blocks, so the engine never waits on a
client or on the link.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from shardgate.v1.params import Finish as Finish
from shardgate.v1.params import Generation, GenerationView, Logprobs, Message
from shardgate.v1.params import Sampling as Sampling

if TYPE_CHECKING:
    from engine_sidecar.kv_mirror import KvMirror

ChatMessage = Message  # (the backends' name for it)


class ErrorCode(enum.IntEnum):
    """Values match engine.proto's `ErrorCode`."""

    NONE = 0
    INVALID_ARGUMENT = 1
    NOT_FOUND = 2
    UNAVAILABLE = 3
    INTERNAL = 4


class RequestError(Exception):
    """A request the engine refuses; `field` names the request field at fault, if any."""

    def __init__(self, code: ErrorCode, message: str, field: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


class EngineRequest(GenerationView):
    """One generation: its engine parameters as the gateway sent them, and the link-local key.

    `resume_token_ids` are tokens an earlier run already generated: the engine continues after
    them as if it had generated them itself (they count towards max_tokens and usage).
    """

    __slots__ = ("generation", "key", "resume_token_ids")

    def __init__(
        self, key: int, generation: Generation, resume_token_ids: tuple[int, ...] = ()
    ) -> None:
        self.key = key
        self.generation = generation
        self.resume_token_ids = resume_token_ids

    @property
    def priority(self) -> int:
        return self.generation.priority


@dataclass(slots=True)
class EngineDelta:
    """What one request gained in one engine step.

    The first delta of a run carries prompt_tokens and cached_tokens; the last carries a
    finish other than NONE, prompt_tokens, cached_tokens and completion_tokens (all generated
    tokens of the request, resumed ones included). An error ends the request with finish ERROR.
    """

    key: int
    token_ids: list[int]
    text: str
    finish: Finish = Finish.NONE
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str = ""
    error_field: str = ""
    # With logprobs asked for: one entry per token id.
    logprobs: list[Logprobs] | None = None
    stop_sequence: str = ""  # on the last delta: the stop string that ended it, if one did
    # A chat request whose output the engine parses: shardgate/v1/parsed.py `Parsed`, msgpack.
    parsed: bytes = b""
    # With prompt logprobs asked for, on the first delta of the first run: one per prompt token.
    prompt_logprobs: list[Logprobs] | None = None


@dataclass(frozen=True, slots=True)
class LoadSnapshot:
    running: int
    waiting: int
    kv_usage: float
    max_num_seqs: int
    ready: bool
    preemptions: int = 0
    prefix_hit_rate: float = 0.0
    generated_tokens: int = 0
    # Engine steps that advanced a request (prefill or output), monotonic; None: not known.
    steps: int | None = None


@dataclass(frozen=True, slots=True)
class ModelCard:
    name: str
    max_model_len: int
    loras: tuple[str, ...] = ()
    # How a gateway tokenizes its prompts to name KV blocks as the engine does: "sim", a
    # Hugging Face tokenizer's directory or name, or "" (not said).
    tokenizer: str = ""


@dataclass(frozen=True, slots=True)
class BackendInfo:
    backend: str
    models: tuple[ModelCard, ...]
    max_num_seqs: int
    extra: dict[str, str] = field(default_factory=dict)
    # The optional sampling fields the engine honours (shardgate/v1/params.py OPTIONAL).
    capabilities: frozenset[str] = frozenset()
    # The engine's prefix cache is reported (the backend's `kv` mirror), in blocks of this many
    # tokens; 0: it is not.
    kv_block_size: int = 0


DeltaSink = Callable[[list[EngineDelta]], None]


class Tokenizes(Protocol):
    """A backend that can say how its engine tokenises (vLLM's /tokenize and /detokenize).
    A backend that asks its engine server answers with an awaitable."""

    def tokenize(self, request: EngineRequest) -> list[int] | Awaitable[list[int]]:
        """The prompt's ids, chat template applied; raises RequestError (model, lora, input)."""

    def detokenize(self, model: str, ids: list[int]) -> str | Awaitable[str]:
        """The text of `ids`; raises RequestError (unknown model, ids out of the vocabulary)."""


class ReportsKv(Protocol):
    """A backend that reports what its engine's prefix cache holds (KV events): it feeds
    `kv` (engine_sidecar/kv_mirror.py), which every link session reads. None: not reported."""

    @property
    def kv(self) -> KvMirror | None: ...


class LoadsLoras(Protocol):
    """A backend that loads and unloads LoRA adapters at run time (vLLM's
    /v1/load_lora_adapter and /v1/unload_lora_adapter). Its `info()` shows the change at once.
    The servicer has checked the name (not empty, not a served model's, loaded or not)."""

    async def load_lora(self, name: str, path: str) -> None:
        """Load the adapter at `path` as `name`; raises RequestError (NOT_FOUND: no adapter
        there; INVALID_ARGUMENT: one the engine cannot take)."""

    async def unload_lora(self, name: str) -> None:
        """Forget `name`: new requests naming it are refused; running ones finish."""


class Backend(Protocol):
    def info(self) -> BackendInfo: ...

    async def start(self, sink: DeltaSink) -> None:
        """Start the engine; every step's deltas go to `sink` (called on the event loop)."""

    async def stop(self) -> None:
        """Stop the engine; unfinished requests end with finish ABORT."""

    def submit(self, request: EngineRequest) -> None:
        """Queue a request, or raise RequestError (unknown model, prompt too long, ...)."""

    def abort(self, key: int) -> None:
        """Stop a request; unknown keys are ignored. No delta follows an abort."""

    def load(self) -> LoadSnapshot: ...

    def healthy(self) -> bool:
        """False once the engine is dead; the sidecar then reports NOT_SERVING."""
