"""A request's engine parameters are defined once (shardgate/v1/params.py): engine.proto and the
TCP link carry that definition, not copies of its fields, and both deliver it unchanged."""

from __future__ import annotations

import msgspec
import pytest
from shardgate.v1 import engine_pb2 as pb
from shardgate.v1 import params, wire
from shardgate.v1.params import Template, ToolCall, Tools

from engine_sidecar import convert as sidecar
from engine_sidecar.backend import RequestError
from gateway.types import GenerationRequest, Message, Sampling
from gateway.upstream import convert as gateway

REQUEST = GenerationRequest(
    "r-1",
    "m",
    Sampling(
        max_tokens=9,
        temperature=0.5,
        top_p=0.9,
        top_k=4,
        seed=7,
        stop=("x",),
        presence_penalty=0.5,
        logit_bias={5: -100.0, 9: 2.5},
        stop_token_ids=(2,),
        min_tokens=3,
        allowed_token_ids=(5, 9),
    ),
    messages=(
        Message("system", "be brief"),
        Message("user", "hi"),
        Message("assistant", "", (ToolCall("c1", "f", '{"a": 1}'),)),
        Message("tool", "2", tool_call_id="c1"),
    ),
    priority=3,
    lora="a1",
)
REQUEST.generation.tools = Tools(tools='[{"type": "function"}]', choice="function", function="f")
REQUEST.generation.template = Template(
    chat_template="{{ messages }}",
    kwargs='{"enable_thinking": false}',
    add_generation_prompt=False,
    continue_final_message=True,
    documents='[{"title": "t", "text": "x"}]',
)
REQUEST.generation.add_special_tokens = True


def test_engine_proto_carries_the_definition_not_its_fields() -> None:
    fields = {f.name for f in pb.SubmitRequest.DESCRIPTOR.fields}
    assert fields == {"key", "resume_token_ids", "generation"}
    assert pb.SubmitRequest.DESCRIPTOR.fields_by_name["generation"].type == (
        pb.SubmitRequest.DESCRIPTOR.fields_by_name["generation"].TYPE_BYTES
    )


def test_the_tcp_link_carries_the_same_message() -> None:
    names = [f.name for f in msgspec.structs.fields(wire.WireSubmit)]
    assert names == ["key", "generation", "resume_token_ids"]
    assert set(names) == {f.name for f in pb.SubmitRequest.DESCRIPTOR.fields}
    generation = msgspec.structs.fields(wire.WireSubmit)[1]
    assert generation.type is params.Generation


def test_the_core_request_holds_the_definition_itself() -> None:
    assert isinstance(REQUEST.generation, params.Generation)
    assert REQUEST.generation.priority == 3 and REQUEST.generation.model == "m"
    REQUEST.model = "fallback"  # what the gateway changes reaches the engine's parameters
    assert REQUEST.generation.model == "fallback"
    REQUEST.model = "m"


def test_both_transports_deliver_the_parameters_unchanged() -> None:
    over_grpc = sidecar.to_request(gateway.to_submit(REQUEST, 5, (1, 2)), 0)
    body = msgspec.msgpack.encode(wire.Up([gateway.to_wire_submit(REQUEST, 5, (1, 2))]))
    over_tcp = sidecar.from_wire(msgspec.msgpack.decode(body, type=wire.Up).submits[0])
    for got in (over_grpc, over_tcp):
        assert got.generation == REQUEST.generation
        assert got.resume_token_ids == (1, 2)
    # Every field of the definition, each one different from its default, made it through.
    defaults = params.Generation(request_id="", model="", sampling=Sampling(max_tokens=1))
    for f in msgspec.structs.fields(params.Generation):
        if f.name != "prompt" and f.name != "prompt_token_ids":
            assert getattr(REQUEST.generation, f.name) != getattr(defaults, f.name), f.name


def test_asked_names_the_optional_fields_off_their_defaults() -> None:
    assert params.asked(REQUEST.sampling) == [
        "presence_penalty",
        "logit_bias",
        "stop_token_ids",
        "min_tokens",
        "allowed_token_ids",
    ]
    assert params.asked(Sampling(max_tokens=3)) == []
    # The optional fields follow the base ones (what the one-comparison fast path relies on).
    names = [f.name for f in msgspec.structs.fields(Sampling)]
    assert list(params.OPTIONAL) == names[len(names) - len(params.OPTIONAL) :]
    assert params.not_resumable(REQUEST.sampling) == ["presence_penalty"]


def test_malformed_parameters_are_refused_by_name() -> None:
    with pytest.raises(RequestError, match="malformed request parameters"):
        sidecar.to_request(pb.SubmitRequest(key=1, generation=b"\x93\x01"), 0)


def test_the_grpc_api_takes_every_sampling_field() -> None:
    from shardgate.v1 import gateway_pb2 as gpb

    fields = {f.name for f in gpb.GenerateRequest.DESCRIPTOR.fields}
    for f in msgspec.structs.fields(Sampling):
        name = "structured_outputs" if f.name == "structured" else f.name
        assert name in fields, f"gateway.proto GenerateRequest lacks {name}"


def test_both_transports_deliver_a_parsed_answer_unchanged() -> None:
    from shardgate.v1 import parsed

    from engine_sidecar.backend import EngineDelta
    from engine_sidecar.link import Batch
    from engine_sidecar.tcp_link import encode

    answer = parsed.Parsed(
        content="", tool_calls=(parsed.ToolCallDelta(index=0, id="c", name="f", arguments="{}"),)
    )
    d = EngineDelta(3, [7], "[f()]", parsed=parsed.encode(answer))
    m = pb.Delta()
    sidecar.fill_delta(m, 3, d)
    over_grpc = gateway.from_pb_delta(pb.Delta.FromString(m.SerializeToString()))
    frame = encode(Batch([(3, d)], None, None))
    over_tcp = msgspec.msgpack.decode(frame[4:], type=wire.Down).deltas[0]
    for got in (over_grpc, over_tcp):
        assert parsed.decode(got.parsed) == answer and got.text == "[f()]"
