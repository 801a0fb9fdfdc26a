"""Core <-> engine wire conversions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shardgate.v1 import engine_pb2 as pb
from shardgate.v1 import params
from shardgate.v1.wire import WireDelta, WireSubmit

from gateway.types import (
    GatewayError,
    GenerationRequest,
    InvalidRequest,
    ModelNotFound,
    Unavailable,
    UpstreamError,
)


@dataclass(frozen=True, slots=True)
class EndpointInfo:
    sidecar_id: str
    backend: str
    models: dict[str, int]  # served model -> max_model_len
    loras: dict[str, tuple[str, ...]]
    group: str
    rank: int
    world_size: int
    max_num_seqs: int
    heartbeat_interval_s: float
    capabilities: frozenset[str] = frozenset()  # optional sampling fields its engine honours


@dataclass(frozen=True, slots=True)
class Load:
    seq: int
    running: int
    waiting: int
    kv_usage: float
    max_num_seqs: int
    ready: bool
    steps: int | None = None  # engine progress (None: the sidecar does not report it)
    held: int = 0  # requests the engine holds, every gateway's


def endpoint_info(m: pb.InfoReply) -> EndpointInfo:
    return EndpointInfo(
        sidecar_id=m.sidecar_id,
        backend=m.backend,
        models={c.name: c.max_model_len for c in m.models},
        loras={c.name: tuple(c.loras) for c in m.models},
        group=m.group,
        rank=m.rank,
        world_size=max(1, m.world_size),
        max_num_seqs=m.max_num_seqs,
        heartbeat_interval_s=m.heartbeat_interval_s,
        capabilities=frozenset(m.capabilities),
    )


def load(m: pb.LoadReport) -> Load:
    steps = m.steps if m.HasField("steps") else None
    return Load(m.seq, m.running, m.waiting, m.kv_usage, m.max_num_seqs, m.ready, steps, m.held)


def to_submit(req: GenerationRequest, key: int, resume: Sequence[int] = ()) -> pb.SubmitRequest:
    return pb.SubmitRequest(
        key=key, generation=params.encode(req.generation), resume_token_ids=resume
    )


def to_wire_submit(req: GenerationRequest, key: int, resume: Sequence[int] = ()) -> WireSubmit:
    return WireSubmit(key, req.generation, list(resume))


def from_pb_delta(d: pb.Delta) -> WireDelta:
    """A gRPC Link delta as the TCP link carries it (what EngineLink.deliver takes)."""
    return WireDelta(
        d.key,
        list(d.token_ids),
        d.text,
        d.finish,
        d.prompt_tokens,
        d.cached_tokens,
        d.completion_tokens,
        d.error_code,
        d.error_message,
        d.error_field,
        params.decode_logprobs(d.logprobs) if d.logprobs else None,
        d.stop_sequence,
        d.parsed,
        params.decode_logprobs(d.prompt_logprobs) if d.prompt_logprobs else None,
    )


def delta_error(d: WireDelta) -> GatewayError:
    field = d.error_field or None
    code = d.error_code
    if code == pb.ERROR_INVALID_ARGUMENT:
        return InvalidRequest(d.error_message, field)
    if code == pb.ERROR_NOT_FOUND:
        return ModelNotFound(d.error_message, field)
    if code == pb.ERROR_UNAVAILABLE:
        return Unavailable(d.error_message)
    return UpstreamError(d.error_message or "the engine failed the request")
