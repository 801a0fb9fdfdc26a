"""The gateway's gRPC API as grpcurl drives it, with no generated stubs: the services listed and
their file descriptors fetched through the server's reflection service (grpcio-reflection's
client), the request messages built from those descriptors (descriptor_pool, message_factory),
then ListModels (unary) and Generate (server streaming) called by their method paths."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.clients.conftest import MAX_TOKENS, MODEL, client_module
from tests.integration.vllm_cluster import VllmCluster

pytestmark = pytest.mark.timeout(600)  # may be the first to start the shared engine

SERVICE = "shardgate.v1.Gateway"


def _reflected(target: str) -> dict[str, Any]:
    """Everything a reflection client learns and gets, on a blocking channel."""
    grpc = client_module("grpc")
    client_module("grpc_reflection")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    out: dict[str, Any] = {}
    with grpc.insecure_channel(target) as channel:
        # The reflection service's own calls, as grpcurl makes them.
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        asks = [
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE),
        ]
        listed, files = list(stub.ServerReflectionInfo(iter(asks), timeout=30))
        out["services"] = sorted(s.name for s in listed.list_services_response.service)
        protos = []
        for raw in files.file_descriptor_response.file_descriptor_proto:
            fd = descriptor_pb2.FileDescriptorProto()
            fd.ParseFromString(raw)
            protos.append(fd)
        out["files"] = {fd.name: [s.name for s in fd.service] for fd in protos}

        # Descriptors from the server alone (the file and its dependencies, as reflection
        # sends them), in a pool of their own; each file after those it imports.
        pool = descriptor_pool.DescriptorPool()
        added: set[str] = set()
        while len(added) < len(protos):
            ready = [fd for fd in protos if fd.name not in added and set(fd.dependency) <= added]
            assert ready, f"files whose imports were not sent: {sorted(f.name for f in protos)}"
            for fd in ready:
                pool.Add(fd)
                added.add(fd.name)
        service = pool.FindServiceByName(SERVICE)
        out["methods"] = sorted(m.name for m in service.methods)

        def method(name: str) -> tuple[str, Any, Any]:
            m = service.methods_by_name[name]
            request = message_factory.GetMessageClass(m.input_type)
            response = message_factory.GetMessageClass(m.output_type)
            return f"/{service.full_name}/{m.name}", request, response

        path, request, response = method("ListModels")
        list_models = channel.unary_unary(
            path, request_serializer=request.SerializeToString,
            response_deserializer=response.FromString,
        )  # fmt: skip
        out["models"] = list_models(request(), timeout=30)

        path, request, response = method("Generate")
        ask = request(model=MODEL, max_tokens=MAX_TOKENS, ignore_eos=True, temperature=0.0)
        ask.chat.messages.add(role="user", content="Tell me about shards.")
        generate = channel.unary_stream(
            path, request_serializer=request.SerializeToString,
            response_deserializer=response.FromString,
        )  # fmt: skip
        call = generate(ask, timeout=120)
        out["responses"] = list(call)
        out["metadata"] = dict(call.initial_metadata())
        out["code"] = call.code()
    return out


async def test_services_descriptors_and_calls(served: VllmCluster) -> None:
    grpc = client_module("grpc")
    got = await asyncio.to_thread(_reflected, served.grpc_target)

    assert got["services"] == [
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        SERVICE,
    ]
    assert got["files"]["shardgate/v1/gateway.proto"] == ["Gateway"]
    assert got["methods"] == ["Generate", "ListModels", "Resume"]

    assert [m.id for m in got["models"].models] == [MODEL]

    responses = got["responses"]
    assert got["code"] == grpc.StatusCode.OK
    assert got["metadata"]["x-shardgate-replica"] == served.sidecar_target
    assert len([t for r in responses for t in r.token_ids]) == MAX_TOKENS
    assert "".join(r.text for r in responses)
    last = responses[-1]
    assert last.finish_reason == "length"
    assert last.usage.completion_tokens == MAX_TOKENS
    assert last.usage.total_tokens == last.usage.prompt_tokens + MAX_TOKENS
    assert all(not r.HasField("usage") for r in responses[:-1])
