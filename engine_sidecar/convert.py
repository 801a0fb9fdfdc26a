"""Wire <-> backend conversions (protobuf, and the TCP link's msgpack structs)."""

from __future__ import annotations

from shardgate.v1 import engine_pb2 as pb
from shardgate.v1 import wire

from engine_sidecar.backend import (
    BackendInfo,
    ChatMessage,
    EngineDelta,
    EngineRequest,
    LoadSnapshot,
    Sampling,
)


def to_request(msg: pb.SubmitRequest, key: int) -> EngineRequest:
    s = msg.sampling
    which = msg.WhichOneof("input")
    return EngineRequest(
        key=key,
        request_id=msg.request_id,
        model=msg.model,
        sampling=Sampling(
            max_tokens=s.max_tokens,
            temperature=s.temperature,
            top_p=s.top_p if s.top_p > 0 else 1.0,
            top_k=s.top_k,
            seed=s.seed if s.HasField("seed") else None,
            stop=tuple(s.stop),
            ignore_eos=s.ignore_eos,
        ),
        prompt=msg.prompt if which == "prompt" else None,
        messages=(
            tuple(ChatMessage(m.role, m.content) for m in msg.chat.messages)
            if which == "chat"
            else None
        ),
        prompt_token_ids=tuple(msg.prompt_token_ids.ids) if which == "prompt_token_ids" else None,
        resume_token_ids=tuple(msg.resume_token_ids),
        priority=msg.priority,
        lora=msg.lora,
    )


def from_wire(sub: wire.WireSubmit) -> EngineRequest:
    s = sub.sampling
    return EngineRequest(
        key=0,
        request_id=sub.request_id,
        model=sub.model,
        sampling=Sampling(
            max_tokens=s.max_tokens,
            temperature=s.temperature,
            top_p=s.top_p if s.top_p > 0 else 1.0,
            top_k=s.top_k,
            seed=s.seed,
            stop=tuple(s.stop),
            ignore_eos=s.ignore_eos,
        ),
        prompt=sub.prompt,
        messages=(
            tuple(ChatMessage(role, content) for role, content in sub.messages)
            if sub.messages is not None
            else None
        ),
        prompt_token_ids=(
            tuple(sub.prompt_token_ids) if sub.prompt_token_ids is not None else None
        ),
        resume_token_ids=tuple(sub.resume_token_ids),
        priority=sub.priority,
        lora=sub.lora,
    )


def link_response(
    items: list[tuple[int, EngineDelta]],
    load: pb.LoadReport | None,
    info: pb.InfoReply | None,
) -> pb.LinkResponse:
    out = pb.LinkResponse()
    for key, d in items:
        fill_delta(out.deltas.add(), key, d)
    if load is not None:
        out.load.CopyFrom(load)
    if info is not None:
        out.info.CopyFrom(info)
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
    if d.prompt_tokens:
        m.prompt_tokens = d.prompt_tokens
        m.cached_tokens = d.cached_tokens
    if d.error_code:
        m.error_code = d.error_code  # type: ignore[assignment]
        m.error_message = d.error_message
        m.error_field = d.error_field


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
        m.models.add(name=card.name, max_model_len=card.max_model_len, loras=list(card.loras))
    m.group = group
    m.rank = rank
    m.world_size = world_size
    m.max_num_seqs = info.max_num_seqs
    m.heartbeat_interval_s = heartbeat_interval_s
