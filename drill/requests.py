"""The drill's requests: a fixed set of distinct prompts, and what came back for each one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One distinct request of the drill's load (always streamed, greedy, `ignore_eos`)."""

    index: int
    prompt: str
    max_tokens: int


@dataclass(slots=True)
class RequestRecord:
    """What one streamed request returned."""

    index: int  # its RequestSpec
    started: float  # monotonic seconds
    ended: float = 0.0
    status: int = 0  # HTTP status (0: no response head)
    replica: str = ""  # x-shardgate-replica: the sidecar that first took it
    text: str = ""
    completion_tokens: int | None = None  # from the usage chunk
    finish_reason: str | None = None
    done: bool = False  # `data: [DONE]` arrived
    error: str | None = None  # an error event, a broken connection, a deadline


def make_specs(count: int, min_tokens: int, max_tokens: int) -> list[RequestSpec]:
    """`count` distinct prompts; output lengths spread evenly over [min_tokens, max_tokens]."""
    if count <= 0:
        raise ValueError("count must be > 0")
    if not 0 < min_tokens <= max_tokens:
        raise ValueError("need 0 < min_tokens <= max_tokens")
    span = max_tokens - min_tokens
    specs = []
    for i in range(count):
        tokens = min_tokens + (span * ((i * 7) % count)) // max(count - 1, 1)
        prompt = f"Drill request {i}: describe shard {i * 37 % 101} of the cluster in detail."
        specs.append(RequestSpec(i, prompt, tokens))
    return specs
