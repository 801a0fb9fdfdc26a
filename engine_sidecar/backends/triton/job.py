"""What a Triton convention makes of one request, and what it reads from each response."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from shardgate.v1.params import Sampling, asked

from engine_sidecar.backend import EngineRequest, ErrorCode, RequestError


@dataclass(slots=True)
class Job:
    request: EngineRequest
    inputs: list[Any]  # KServe input tensors
    max_tokens: int  # tokens left to generate
    resumed: int  # tokens an earlier run generated (count towards usage)
    prompt_tokens: int = 0  # 0: unknown until the first response tells it
    context: list[int] = field(default_factory=list)  # token ids the engine continues from


@dataclass(slots=True)
class Step:
    """One response: new tokens (ids, if the model gives them, and text)."""

    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    count: int = 0  # tokens this response adds
    finish_reason: str | None = None
    prompt_tokens: int | None = None


class Reader(Protocol):
    def read(self, response: Any) -> Step: ...


class Convention(Protocol):
    name: str

    def prepare(self, request: EngineRequest) -> Job:
        """Validate (raises RequestError) and build the inputs."""

    def reader(self, job: Job) -> Reader: ...


def refuse_unannounced(s: Sampling, capabilities: frozenset[str], convention: str) -> None:
    """A field the convention does not announce is refused by name, never sent and ignored
    (the gateway refuses it first; this guards any other client of the link)."""
    for name in asked(s):
        if name not in capabilities:
            raise RequestError(
                ErrorCode.INVALID_ARGUMENT,
                f"{name} is not supported by the {convention} convention",
                name,
            )
