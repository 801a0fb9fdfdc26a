"""Keys, through the real API: with tenants configured every /v1 route needs one (as with
`vllm serve --api-key`), on both HTTP paths, in gRPC too; a 401 without one names the header
(or metadata) its protocol sends keys in; `gateway.public_routes` opens the model listings,
and reloads."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from shardgate.v1 import gateway_pb2 as pb
from shardgate.v1 import gateway_pb2_grpc as pb_grpc

from engine_sidecar.backends.sim import SimConfig
from tests.integration.cluster import Cluster

KEY = "sk-team"
BEARER = {"Authorization": f"Bearer {KEY}"}
TENANTS = "tenants:\n  - {name: team, keys: [sk-team]}\n"
MISSING_BEARER = "missing API key: send 'Authorization: Bearer <key>'"
MISSING_X_API_KEY = "missing API key: send 'x-api-key: <key>'"
MISSING_METADATA = "missing API key: send the 'authorization' metadata ('Bearer <key>')"
MESSAGES = [{"role": "user", "content": "hi"}]
CHAT = {"model": "sim-llama", "messages": MESSAGES, "max_tokens": 2}
COMPLETION = {"model": "sim-llama", "prompt": "hi", "max_tokens": 2}
MESSAGE = {"model": "sim-llama", "max_tokens": 2, "messages": MESSAGES}


def gateway_yaml(lean: bool = True, more: str = "") -> str:
    return (
        f"gateway: {{default_max_tokens: 4, watch_config: false, lean_http: {str(lean).lower()}"
        f"{more}}}\n{TENANTS}"
    )


def start(tmp: Path, lean: bool) -> Cluster:
    sim = SimConfig(model="sim-llama", profile="fast")
    c = Cluster(gateway_yaml(lean), [{"sim": sim}], config_path=tmp / "gateway.yaml")
    c.start()
    return c


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start(tmp_path_factory.mktemp("auth"), lean=True)
    yield c
    c.stop()


@pytest.fixture(scope="module", params=["lean", "aiohttp"])
def front(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """The streaming routes served by the lean path (the default), or by aiohttp."""
    c = start(tmp_path_factory.mktemp(request.param), lean=request.param == "lean")
    yield c
    c.stop()


def call(c: Cluster, method: str, path: str, body: Any = None, **headers: str) -> httpx.Response:
    return httpx.request(method, f"{c.http_url}{path}", json=body, headers=headers, timeout=30)


def openai_401(r: httpx.Response) -> str:
    assert r.status_code == 401, (r.request.url, r.text)
    error = r.json()["error"]
    assert error["type"] == "authentication_error"
    return str(error["message"])


def reloaded(c: Cluster, gateway: str, extra: str = "") -> httpx.Response:
    """POST /admin/reload (loopback: no admin key) of the config with `gateway` as its first
    line and `extra` after it."""
    assert c.config_path is not None
    c.config_path.write_text(c.config_text(gateway + extra, [0]))
    return httpx.post(f"{c.http_url}/admin/reload", timeout=30)


@pytest.fixture
def restore(cluster: Cluster) -> Iterator[None]:
    yield
    assert reloaded(cluster, gateway_yaml()).status_code == 200


def test_the_generation_routes_need_a_key_on_either_path(front: Cluster) -> None:
    for path, body in (("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)):
        assert openai_401(call(front, "POST", path, body)) == MISSING_BEARER
        # before the body is read: one that does not decode is refused for its key first
        assert openai_401(call(front, "POST", path, {"model": 1})) == MISSING_BEARER
        wrong = call(front, "POST", path, body, Authorization="Bearer sk-wrong")
        assert openai_401(wrong) == "invalid API key"
        assert call(front, "POST", path, body, **BEARER).status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/models"),
        ("GET", "/v1/models/sim-llama"),
        ("GET", "/v1/models/nope"),
        ("GET", "/v1/streams/nope"),
        ("POST", "/v1/responses"),
        ("GET", "/v1/responses/resp_nope"),
        ("POST", "/v1/responses/resp_nope/cancel"),
        ("GET", "/v1/nope"),
    ],
)
def test_every_v1_route_needs_a_key(cluster: Cluster, method: str, path: str) -> None:
    body = {"model": "sim-llama", "input": "hi"} if method == "POST" else None
    assert openai_401(call(cluster, method, path, body)) == MISSING_BEARER
    wrong = call(cluster, method, path, body, Authorization="Bearer sk-wrong")
    assert openai_401(wrong) == "invalid API key"
    assert call(cluster, method, path, body, **BEARER).status_code != 401


def test_with_a_key_the_models_are_listed(cluster: Cluster) -> None:
    listed = call(cluster, "GET", "/v1/models", **BEARER)
    assert listed.status_code == 200
    assert [m["id"] for m in listed.json()["data"]] == ["sim-llama"]
    one = call(cluster, "GET", "/v1/models/sim-llama", **BEARER)
    assert one.status_code == 200 and one.json()["id"] == "sim-llama"


@pytest.mark.parametrize("path", ["/health", "/healthz", "/readyz", "/metrics"])
def test_the_probes_and_metrics_need_none(cluster: Cluster, path: str) -> None:
    assert call(cluster, "GET", path).status_code == 200


def test_the_admin_routes_keep_the_admin_keys_answer(cluster: Cluster) -> None:
    """(From loopback without an admin_key: open; a tenant's key is not asked for.)"""
    r = call(cluster, "POST", "/v1/unload_lora_adapter", {"lora_name": "nope"})
    assert r.status_code == 404


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_anthropic_routes_name_x_api_key_in_anthropics_shape(cluster: Cluster, path: str) -> None:
    r = call(cluster, "POST", path, MESSAGE)
    assert r.status_code == 401
    assert r.json() == {
        "type": "error",
        "error": {"type": "authentication_error", "message": MISSING_X_API_KEY},
    }
    assert call(cluster, "POST", path, MESSAGE, **{"x-api-key": KEY}).status_code == 200
    assert call(cluster, "POST", path, MESSAGE, **BEARER).status_code == 200


def grpc_error(call: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        call()
    return e.value


def test_grpc_calls_name_the_authorization_metadata(cluster: Cluster) -> None:
    meta = (("authorization", f"Bearer {KEY}"),)
    with grpc.insecure_channel(cluster.grpc_target) as ch:
        stub = pb_grpc.GatewayStub(ch)
        gen = pb.GenerateRequest(model="sim-llama", prompt="hi", max_tokens=2)
        calls = {
            "Generate": lambda: list(stub.Generate(gen, timeout=10)),
            "Resume": lambda: list(stub.Resume(pb.ResumeRequest(stream_id="nope"), timeout=10)),
            "ListModels": lambda: stub.ListModels(pb.ListModelsRequest(), timeout=10),
        }
        for name, rpc in calls.items():
            e = grpc_error(rpc)
            assert e.code() == grpc.StatusCode.UNAUTHENTICATED, name
            assert e.details() == MISSING_METADATA, name
        assert list(stub.Generate(gen, metadata=meta, timeout=10))
        listed = stub.ListModels(pb.ListModelsRequest(), metadata=meta, timeout=10)
        assert [m.id for m in listed.models] == ["sim-llama"]


def test_public_routes_open_the_listings_and_reload(cluster: Cluster, restore: None) -> None:
    opened = ", public_routes: [/v1/models, shardgate.v1.Gateway/ListModels]"
    assert reloaded(cluster, gateway_yaml(more=opened)).status_code == 200
    listed = call(cluster, "GET", "/v1/models")
    assert listed.status_code == 200
    assert [m["id"] for m in listed.json()["data"]] == ["sim-llama"]
    assert openai_401(call(cluster, "GET", "/v1/models/sim-llama")) == MISSING_BEARER
    assert openai_401(call(cluster, "POST", "/v1/chat/completions", CHAT)) == MISSING_BEARER
    with grpc.insecure_channel(cluster.grpc_target) as ch:
        models = pb_grpc.GatewayStub(ch).ListModels(pb.ListModelsRequest(), timeout=10)
    assert [m.id for m in models.models] == ["sim-llama"]
    # a route that serves a tenant is not one of them: refused, and the config in force stays
    bad = reloaded(cluster, gateway_yaml(more=", public_routes: [/v1/chat/completions]"))
    assert bad.status_code == 400
    assert "gateway.public_routes" in bad.json()["error"]
    assert call(cluster, "GET", "/v1/models").status_code == 200
    assert reloaded(cluster, gateway_yaml()).status_code == 200
    assert openai_401(call(cluster, "GET", "/v1/models")) == MISSING_BEARER


def test_an_anonymous_tenant_is_what_a_request_without_a_key_is(
    cluster: Cluster, restore: None
) -> None:
    assert reloaded(cluster, gateway_yaml(), "anonymous: team\n").status_code == 200
    assert call(cluster, "GET", "/v1/models").status_code == 200
    assert call(cluster, "POST", "/v1/chat/completions", CHAT).status_code == 200
    wrong = call(cluster, "GET", "/v1/models", Authorization="Bearer sk-wrong")
    assert openai_401(wrong) == "invalid API key"
