"""LoRA adapters loaded and unloaded at run time through the gateway (vLLM's
/v1/load_lora_adapter and /v1/unload_lora_adapter), on sim sidecars: admin-only, answered as
vLLM answers, and seen by the router as soon as the answer comes, over either link transport."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from engine_sidecar.backends.sim import SimConfig
from tests.contract.harness import eventually
from tests.integration.cluster import Cluster, cut

MESSAGES: list[Any] = [{"role": "user", "content": "Tell me about shards."}]
ADMIN = {"Authorization": "Bearer sk-admin"}
TENANT = "sk-team"


def gateway_yaml(transport: str) -> str:
    return f"""
gateway: {{default_max_tokens: 8, admin_key: sk-admin, link: {{transport: {transport}}}}}
tenants:
  - {{name: team, keys: [{TENANT}]}}
"""


@pytest.fixture(scope="module", params=["auto", "grpc"])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Two sim replicas of sim-llama; `auto` links over TCP, `grpc` over the gRPC Link."""
    c = Cluster(
        gateway_yaml(request.param),
        [{"sim": SimConfig(model="sim-llama")}, {"sim": SimConfig(model="sim-llama")}],
    )
    c.start()
    yield c
    c.stop()


def post(c: Cluster, path: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(
        f"{c.http_url}{path}", json=body, headers=ADMIN if headers is None else headers, timeout=30
    )


def listed(c: Cluster) -> dict[str, Any]:
    req = urllib.request.Request(
        f"{c.http_url}/v1/models", headers={"Authorization": f"Bearer {TENANT}"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return {m["id"]: m for m in json.loads(resp.read())["data"]}


def holder(c: Cluster, i: int) -> str:
    return f"127.0.0.1:{c.sidecars[i].port}"


def test_an_adapter_loaded_on_one_replica_is_routed_there_at_once(cluster: Cluster) -> None:
    r = post(
        cluster,
        "/v1/load_lora_adapter",
        {"lora_name": "sql-adapter", "lora_path": "/adapters/sql", "replicas": ["sim-0"]},
    )
    assert r.status_code == 200, r.text
    assert r.text == "Success: LoRA adapter 'sql-adapter' added successfully."
    try:
        # No wait: the answer comes once the router has the replica's new announcement.
        with openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key=TENANT, max_retries=0) as o:
            for _ in range(6):  # the other replica is idle: only the adapter keeps them here
                raw = o.chat.completions.with_raw_response.create(
                    model="sql-adapter", messages=MESSAGES, max_tokens=4
                )
                assert raw.headers["x-shardgate-replica"] == holder(cluster, 0)
                assert raw.parse().model == "sql-adapter"
        assert listed(cluster)["sql-adapter"]["parent"] == "sim-llama"
    finally:
        r = post(cluster, "/v1/unload_lora_adapter", {"lora_name": "sql-adapter"})
    assert r.status_code == 200, r.text
    assert r.text == "Success: LoRA adapter 'sql-adapter' removed successfully."
    assert "sql-adapter" not in listed(cluster)
    with (
        openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key=TENANT, max_retries=0) as o,
        pytest.raises(openai.NotFoundError),
    ):
        o.chat.completions.create(model="sql-adapter", messages=MESSAGES, max_tokens=4)
    again = post(cluster, "/v1/unload_lora_adapter", {"lora_name": "sql-adapter"})
    assert again.status_code == 404
    assert again.json()["error"]["message"] == "The lora adapter 'sql-adapter' cannot be found."


def test_an_adapter_loads_on_every_replica_of_its_model(cluster: Cluster) -> None:
    r = post(cluster, "/v1/load_lora_adapter", {"lora_name": "chat-adapter", "lora_path": "/a"})
    assert r.status_code == 200, r.text
    try:
        assert cluster.gateway is not None
        pool = cluster.gateway.fleet.assembly.pool("sim-llama")
        assert [("chat-adapter" in p.loras["sim-llama"]) for p in pool] == [True, True]
        twice = post(
            cluster, "/v1/load_lora_adapter", {"lora_name": "chat-adapter", "lora_path": "/a"}
        )
        assert twice.status_code == 400
        assert twice.json()["error"]["message"] == (
            "The lora adapter 'chat-adapter' has already been loaded."
        )
    finally:
        assert post(cluster, "/v1/unload_lora_adapter", {"lora_name": "chat-adapter"}).is_success
    assert cluster.gateway.fleet.adapter_of("chat-adapter") == ("chat-adapter", "")


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        ("/v1/load_lora_adapter", {"lora_name": "x"}, 400, "lora_path"),
        ("/v1/load_lora_adapter", {"lora_path": "/a"}, 400, "lora_name"),
        ("/v1/load_lora_adapter", {"lora_name": "sim-llama", "lora_path": "/a"}, 400, "lora_name"),
        (
            "/v1/load_lora_adapter",
            {"lora_name": "x", "lora_path": "/a", "model": "nope"},
            404,
            "model",
        ),
        (
            "/v1/load_lora_adapter",
            {"lora_name": "x", "lora_path": "/a", "replicas": ["nope"]},
            400,
            "replicas",
        ),
        (
            "/v1/load_lora_adapter",
            {"lora_name": "x", "lora_path": "/a", "load_inplace": True},
            400,
            "load_inplace",
        ),
        ("/v1/load_lora_adapter", {"lora_name": 3, "lora_path": "/a"}, 400, "lora_name"),
        ("/v1/unload_lora_adapter", {}, 400, "lora_name"),
        ("/v1/unload_lora_adapter", {"lora_name": "x", "lora_int_id": 1}, 400, "lora_int_id"),
        ("/v1/unload_lora_adapter", {"lora_name": "never-loaded"}, 404, "lora_name"),
    ],
)
def test_bad_requests_are_refused_by_field(
    cluster: Cluster, path: str, body: Any, status: int, field: str
) -> None:
    r = post(cluster, path, body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == field
    assert "x" not in listed(cluster)


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": f"Bearer {TENANT}"}, {"Authorization": "Bearer sk-admi"}]
)
def test_only_the_admin_key_may_change_adapters(cluster: Cluster, headers: dict[str, str]) -> None:
    for path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
        r = post(cluster, path, {"lora_name": "x", "lora_path": "/a"}, headers)
        assert r.status_code == 401
        assert r.json()["error"]["type"] == "authentication_error"
    assert "x" not in listed(cluster)


@pytest.fixture
def one_down() -> Iterator[Cluster]:
    """Two sim replicas of sim-llama, the second one's connections cut (it is gone)."""
    c = Cluster(
        gateway_yaml("auto"),
        [{"sim": SimConfig(model="sim-llama")}, {"sim": SimConfig(model="sim-llama")}],
    )
    c.start()
    assert c.gateway is not None
    fleet = c.gateway.fleet
    c.run(cut(c.sidecars[1]))
    c.run(eventually(lambda: not fleet.by_name["sim-1"].connected, 10.0))
    yield c
    c.stop()


def test_a_replica_that_is_down_is_left_out_unless_named(one_down: Cluster) -> None:
    body = {"lora_name": "sql-adapter", "lora_path": "/a"}
    named = post(one_down, "/v1/load_lora_adapter", {**body, "replicas": ["sim-1"]})
    assert named.status_code == 503
    assert "sql-adapter" not in listed(one_down)
    r = post(one_down, "/v1/load_lora_adapter", body)
    assert r.status_code == 200, r.text
    with openai.OpenAI(base_url=f"{one_down.http_url}/v1", api_key=TENANT, max_retries=0) as o:
        raw = o.chat.completions.with_raw_response.create(
            model="sql-adapter", messages=MESSAGES, max_tokens=4
        )
    assert raw.headers["x-shardgate-replica"] == holder(one_down, 0)
    assert post(one_down, "/v1/unload_lora_adapter", {"lora_name": "sql-adapter"}).is_success
