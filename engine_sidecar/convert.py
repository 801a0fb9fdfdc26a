"""Wire <-> backend conversions (protobuf, and the TCP link's msgpack structs)."""

from __future__ import annotations

import msgspec
from shardgate.v1 import engine_pb2 as pb
from shardgate.v1 import params, wire

from engine_sidecar.backend import (
    BackendInfo,
    EngineDelta,
    EngineRequest,
    ErrorCode,
    LoadSnapshot,
    RequestError,
)


def to_request(msg: pb.SubmitRequest, key: int) -> EngineRequest:
    """Raises RequestError when its parameters do not decode (a malformed submit)."""
    try:
        generation = params.decode(msg.generation)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise RequestError(ErrorCode.INVALID_ARGUMENT, f"malformed request parameters: {e}") from e
    return EngineRequest(key, generation, tuple(msg.resume_token_ids))


def from_wire(sub: wire.WireSubmit) -> EngineRequest:
    return EngineRequest(0, sub.generation, tuple(sub.resume_token_ids))


def link_response(
    items: list[tuple[int, EngineDelta]],
    load: pb.LoadReport | None,
    info: pb.InfoReply | None,
    kv: pb.KvEvents | None = None,
) -> pb.LinkResponse:
    out = pb.LinkResponse()
    for key, d in items:
        fill_delta(out.deltas.add(), key, d)
    if load is not None:
        out.load.CopyFrom(load)
    if info is not None:
        out.info.CopyFrom(info)
    if kv is not None:
        out.kv.CopyFrom(kv)
    return out


def fill_delta(m: pb.Delta, key: int, d: EngineDelta) -> None:
    m.key = key
    if d.token_ids:
        m.token_ids.extend(d.token_ids)
    if d.text:
        m.text = d.text
    if d.finish:
        m.finish = d.finish  # type: ignore[assignment]
        m.completion_tokens = d.completion_tokens
        if d.stop_sequence:
            m.stop_sequence = d.stop_sequence
    if d.prompt_tokens:
        m.prompt_tokens = d.prompt_tokens
        m.cached_tokens = d.cached_tokens
    if d.logprobs:
        m.logprobs = params.encode_logprobs(d.logprobs)
    if d.error_code:
        m.error_code = d.error_code  # type: ignore[assignment]
        m.error_message = d.error_message
        m.error_field = d.error_field
    if d.parsed:
        m.parsed = d.parsed
    if d.prompt_logprobs:
        m.prompt_logprobs = params.encode_logprobs(d.prompt_logprobs)


def fill_load(m: pb.LoadReport, seq: int, s: LoadSnapshot, held: int) -> None:
    """`held`: the requests the sidecar has handed to the engine and not seen finish."""
    m.seq = seq
    m.running = s.running
    m.waiting = s.waiting
    m.kv_usage = s.kv_usage
    m.max_num_seqs = s.max_num_seqs
    m.ready = s.ready
    m.preemptions = s.preemptions
    m.prefix_hit_rate = s.prefix_hit_rate
    m.generated_tokens = s.generated_tokens
    if s.steps is not None:
        m.steps = s.steps
    m.held = held


def fill_info(
    m: pb.InfoReply,
    *,
    sidecar_id: str,
    info: BackendInfo,
    group: str,
    rank: int,
    world_size: int,
    heartbeat_interval_s: float,
) -> None:
    m.sidecar_id = sidecar_id
    m.backend = info.backend
    for card in info.models:
        m.models.add(
            name=card.name,
            max_model_len=card.max_model_len,
            loras=list(card.loras),
            tokenizer=card.tokenizer,
        )
    m.group = group
    m.rank = rank
    m.world_size = world_size
    m.max_num_seqs = info.max_num_seqs
    m.heartbeat_interval_s = heartbeat_interval_s
    m.protocol_version = params.PROTOCOL_VERSION
    m.capabilities.extend(sorted(info.capabilities))
    m.kv_block_size = info.kv_block_size
