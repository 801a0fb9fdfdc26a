"""The public gRPC API with generated stubs: streaming, errors, reflection, health."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import openai
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from shardgate.v1 import gateway_pb2 as pb
from shardgate.v1 import gateway_pb2_grpc as pb_grpc

from tests.integration.cluster import Cluster


@pytest.fixture
def channel(cluster: Cluster) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(cluster.grpc_target) as ch:
        yield ch


def chat_request(**kw: object) -> pb.GenerateRequest:
    req = pb.GenerateRequest(model="sim-llama", max_tokens=32, ignore_eos=True, **kw)  # type: ignore[arg-type]
    req.chat.messages.add(role="user", content="Tell me about shards.")
    return req


def test_stream_matches_http_and_ends_with_usage(cluster: Cluster, channel: grpc.Channel) -> None:
    stub = pb_grpc.GatewayStub(channel)
    call = stub.Generate(chat_request(), timeout=30)
    responses = list(call)
    metadata = dict(call.initial_metadata())
    assert metadata["x-shardgate-replica"] in cluster.sidecar_targets()
    token_ids = [t for r in responses for t in r.token_ids]
    text = "".join(r.text for r in responses)
    assert len(token_ids) == 32
    last = responses[-1]
    assert last.finish_reason == "length"
    assert last.usage.completion_tokens == 32
    assert last.usage.total_tokens == last.usage.prompt_tokens + 32
    assert all(not r.HasField("usage") for r in responses[:-1])

    client = openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key="none", max_retries=0)
    http = client.chat.completions.create(
        model="sim-llama",
        messages=[{"role": "user", "content": "Tell me about shards."}],
        max_tokens=32,
        extra_body={"ignore_eos": True},
    )
    assert http.choices[0].message.content == text
    assert http.usage is not None and http.usage.prompt_tokens == last.usage.prompt_tokens


def test_n_choices_match_http_by_index(cluster: Cluster, channel: grpc.Channel) -> None:
    stub = pb_grpc.GatewayStub(channel)
    req = chat_request(n=3, seed=17, temperature=1.0)
    texts = ["", "", ""]
    finishes: dict[int, pb.GenerateResponse] = {}
    for r in stub.Generate(req, timeout=30):
        assert r.index not in finishes, "a response after its choice finished"
        texts[r.index] += r.text
        if r.finish_reason:
            finishes[r.index] = r
    assert sorted(finishes) == [0, 1, 2]
    assert all(f.usage.completion_tokens == 32 for f in finishes.values())
    client = openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key="none", max_retries=0)
    http = client.chat.completions.create(
        model="sim-llama",
        messages=[{"role": "user", "content": "Tell me about shards."}],
        max_tokens=32,
        n=3,
        seed=17,
        temperature=1.0,
        extra_body={"ignore_eos": True},
    )
    assert texts == [c.message.content for c in http.choices]
    assert len(set(texts)) > 1


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (
            pb.GenerateRequest(model="sim-llama", prompt="hi", n=2, temperature=0),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            pb.GenerateRequest(model="sim-llama", prompt="hi", n=200),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (pb.GenerateRequest(model="sim-llama", max_tokens=4), grpc.StatusCode.INVALID_ARGUMENT),
        (pb.GenerateRequest(prompt="hi", max_tokens=4), grpc.StatusCode.INVALID_ARGUMENT),
        (
            pb.GenerateRequest(model="sim-llama", prompt="hi", max_tokens=-1),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            pb.GenerateRequest(model="sim-llama", prompt="hi", temperature=9),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            pb.GenerateRequest(model="sim-llama", prompt="word " * 5000, max_tokens=4),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (pb.GenerateRequest(model="nope", prompt="hi", max_tokens=4), grpc.StatusCode.NOT_FOUND),
    ],
)
def test_invalid_requests_get_status_codes(
    channel: grpc.Channel, request_: pb.GenerateRequest, code: grpc.StatusCode
) -> None:
    stub = pb_grpc.GatewayStub(channel)
    with pytest.raises(grpc.RpcError) as e:
        list(stub.Generate(request_, timeout=30))
    assert e.value.code() == code
    assert e.value.details()


def test_list_models(channel: grpc.Channel) -> None:
    reply = pb_grpc.GatewayStub(channel).ListModels(pb.ListModelsRequest(), timeout=10)
    assert [(m.id, m.replicas) for m in reply.models] == [("sim-llama", 2)]


def test_health_and_reflection(channel: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "shardgate.v1.Gateway"):
        status = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = list(
        refl.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
        )
    )
    names = {s.name for s in replies[0].list_services_response.service}
    assert {"shardgate.v1.Gateway", "grpc.health.v1.Health"} <= names


_CHAT = pb.Messages(messages=[pb.Message(role="user", content="hi")])


@pytest.mark.parametrize(
    ("extra", "param", "message"),
    [
        (
            {"include_stop_str_in_output": True},
            "include_stop_str_in_output",
            "not supported by its engine",
        ),
        ({"skip_special_tokens": False}, "skip_special_tokens", "not supported by its engine"),
        ({"logit_bias": {3: 10.0}}, "logit_bias", "the sim generates only the tokens"),
        (
            {"structured_outputs": pb.StructuredOutputs(regex="[ab]+")},
            "structured_outputs",
            "not supported by its engine",
        ),
        ({"tools": [pb.Tool(name="f")], "chat": _CHAT}, "tools", "not supported by its engine"),
        ({"tools": [pb.Tool(name="f")]}, "tools", "tools are for chat requests"),
        (
            {"tools": [pb.Tool(name="f", parameters="{")], "chat": _CHAT},
            "tools[0].parameters",
            "must be a JSON schema",
        ),
        (
            {"tools": [pb.Tool(name="f")], "tool_choice_function": "g", "chat": _CHAT},
            "tool_choice",
            "does not match any of the specified `tools`",
        ),
        ({"min_p": 1.5}, "min_p", "between 0 and 1"),
        ({"frequency_penalty": -3.0}, "frequency_penalty", "between -2 and 2"),
    ],
)
def test_sampling_fields_are_refused_by_name_where_the_engine_cannot_honour_them(
    channel: grpc.Channel, extra: dict[str, Any], param: str, message: str
) -> None:
    stub = pb_grpc.GatewayStub(channel)
    if "chat" not in extra:
        extra = {"prompt": "hi", **extra}
    req = pb.GenerateRequest(model="sim-llama", max_tokens=4, **extra)
    with pytest.raises(grpc.RpcError) as e:
        list(stub.Generate(req, timeout=10))
    err: Any = e.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in err.details()
    assert dict(err.trailing_metadata())["param"] == param


def test_the_sim_honours_logit_bias_and_penalties(channel: grpc.Channel) -> None:
    stub = pb_grpc.GatewayStub(channel)

    def ids(**extra: Any) -> list[int]:
        req = pb.GenerateRequest(
            model="sim-llama", prompt="Tell me more", max_tokens=16, ignore_eos=True, **extra
        )
        return [t for r in stub.Generate(req, timeout=30) for t in r.token_ids]

    plain = ids(temperature=0.0)
    assert set(ids(logit_bias={plain[3]: 100.0})) == {plain[3]}
    # Once generated, the favoured token's logit (about 104) is divided by 50: never again.
    steered = ids(temperature=0.0, logit_bias={plain[3]: 100.0}, repetition_penalty=50.0)
    assert steered[0] == plain[3] and plain[3] not in steered[1:]


def test_the_sim_honours_stop_token_ids_and_min_tokens(channel: grpc.Channel) -> None:
    stub = pb_grpc.GatewayStub(channel)

    def run(prompt: str, max_tokens: int, **extra: Any) -> tuple[list[int], str]:
        req = pb.GenerateRequest(model="sim-llama", prompt=prompt, max_tokens=max_tokens, **extra)
        ids: list[int] = []
        finish = ""
        for r in stub.Generate(req, timeout=30):
            ids += r.token_ids
            finish = r.finish_reason or finish
        return ids, finish

    full, finish = run("Tell me more", 24, ignore_eos=True)
    assert finish == "length" and len(full) == 24
    stop = full[5]
    first = full.index(stop)  # (it may come earlier too)
    assert run("Tell me more", 24, ignore_eos=True, stop_token_ids=[stop]) == (
        full[: first + 1],
        "stop",
    )
    # A prompt whose generation the sim ends early (its end of text, deterministic), then the
    # same with min_tokens past that point: the same tokens, and more.
    for i in range(20):
        early, finish = run(f"prompt {i}", 1500)
        if finish == "stop" and len(early) < 1000:
            break
    else:
        raise AssertionError("no early end of text in 20 prompts")
    longer, _ = run(f"prompt {i}", 1500, min_tokens=len(early) + 10)
    assert len(longer) >= len(early) + 10 and longer[: len(early)] == early
