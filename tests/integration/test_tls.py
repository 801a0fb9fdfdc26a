"""TLS end to end: the openai SDK over https, the gRPC API over TLS, and mutual TLS on the
gateway's links to its sidecars (over the TCP link and over gRPC); the gateway's client
certificate rotated by replacing its files and reloading."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import openai
import pytest
from shardgate.v1 import engine_pb2 as pb
from shardgate.v1 import engine_pb2_grpc as pb_grpc
from shardgate.v1 import gateway_pb2
from shardgate.v1 import gateway_pb2_grpc as gateway_grpc

from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.config import SidecarTls
from gateway.cluster import _wait_ready as wait_ready
from gateway.cluster import banner
from tests.certs import Pair, Pki, make_pki, replace
from tests.integration.cluster import Cluster
from tests.integration.poll import until

SIM = SimConfig(model="sim-llama", profile="fast")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def sidecar_tls(pki: Pki, client_ca: Path) -> SidecarTls:
    return SidecarTls(
        cert_file=str(pki.server.cert_file),
        key_file=str(pki.server.key_file),
        client_ca_file=str(client_ca),
    )


def gateway_yaml(pki: Pki, transport: str, client: Pair) -> str:
    edge = f"{{cert_file: '{pki.server.cert_file}', key_file: '{pki.server.key_file}'}}"
    link = (
        f"{{cert_file: '{client.cert_file}', key_file: '{client.key_file}', "
        f"ca_file: '{pki.ca.cert_file}'}}"
    )
    return f"""
gateway:
  default_max_tokens: 16
  watch_config: false
  http: {{port: 0, tls: {edge}}}
  grpc: {{port: 0, tls: {edge}}}
  link: {{transport: {transport}, tls: {link}}}
"""


@pytest.fixture(scope="module", params=["auto", "grpc"])
def cluster(request: pytest.FixtureRequest, pki: Pki) -> Iterator[Cluster]:
    tls = sidecar_tls(pki, pki.ca.cert_file)
    c = Cluster(gateway_yaml(pki, request.param, pki.client), [{"sim": SIM, "tls": tls}])
    c.start()
    yield c
    c.stop()


def base_url(c: Cluster) -> str:
    assert c.gateway is not None
    return f"https://127.0.0.1:{c.gateway.http_port}"


async def test_the_openai_sdk_over_https(cluster: Cluster, pki: Pki) -> None:
    assert cluster.gateway is not None
    link = cluster.gateway.fleet.links[0]
    assert link.transport == ("tcp" if link.settings.transport == "auto" else "grpc")
    ctx = ssl.create_default_context(cafile=pki.ca.cert_file)
    async with httpx.AsyncClient(verify=ctx, timeout=30) as http:
        api = openai.AsyncOpenAI(
            base_url=f"{base_url(cluster)}/v1", api_key="none", http_client=http, max_retries=0
        )
        messages: list[openai.types.chat.ChatCompletionMessageParam] = [
            {"role": "user", "content": "Hello over TLS."}
        ]
        r = await api.chat.completions.create(model="sim-llama", messages=messages)
        assert r.usage is not None and r.usage.completion_tokens > 0
        stream = await api.chat.completions.create(
            model="sim-llama",
            messages=messages,
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        usage = [chunk.usage async for chunk in stream if chunk.usage is not None]
        assert usage[-1].completion_tokens == 12
        # /tokenize asks a sidecar over its Engine service: over mutual TLS too.
        t = await http.post(
            f"{base_url(cluster)}/tokenize", json={"model": "sim-llama", "prompt": "a b c"}
        )
        assert t.status_code == 200 and t.json()["count"] > 0
        # So does Anthropic's count_tokens.
        c = await http.post(
            f"{base_url(cluster)}/v1/messages/count_tokens",
            json={"model": "sim-llama", "messages": [{"role": "user", "content": "a b c"}]},
        )
        assert c.status_code == 200 and c.json()["input_tokens"] > 0


async def test_shardgate_up_sees_a_tls_gateway_ready(cluster: Cluster) -> None:
    assert cluster.gateway is not None
    url = f"https://127.0.0.1:{cluster.gateway.http_port}/readyz"
    assert await wait_ready(url, asyncio.get_running_loop().time() + 10, tls=True)
    assert banner(cluster.gateway.config, 1, 2).startswith(
        "shardgate is up: OpenAI API at https://127.0.0.1:1/v1"
    )


async def test_the_grpc_api_over_tls(cluster: Cluster, pki: Pki) -> None:
    creds = grpc.ssl_channel_credentials(pki.ca.cert_file.read_bytes())
    req = gateway_pb2.GenerateRequest(model="sim-llama", prompt="hi", max_tokens=8, ignore_eos=True)
    async with grpc.aio.secure_channel(cluster.grpc_target, creds) as ch:
        replies = [r async for r in gateway_grpc.GatewayStub(ch).Generate(req, timeout=30)]
    assert sum(len(r.token_ids) for r in replies) == 8
    async with grpc.aio.insecure_channel(cluster.grpc_target) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await gateway_grpc.GatewayStub(ch).ListModels(
                gateway_pb2.ListModelsRequest(), timeout=5
            )
    assert e.value.code() is grpc.StatusCode.UNAVAILABLE


async def info_code(pki: Pki, port: int, client: Pair) -> grpc.StatusCode:
    creds = grpc.ssl_channel_credentials(
        pki.ca.cert_file.read_bytes(), client.key_file.read_bytes(), client.cert_file.read_bytes()
    )
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", creds) as ch:
        try:
            await pb_grpc.EngineStub(ch).Info(pb.InfoRequest(), timeout=5)
        except grpc.aio.AioRpcError as e:
            return e.code()
    return grpc.StatusCode.OK


async def reload(c: Cluster) -> bool:
    assert c.gateway is not None and c.gateway.reloader is not None
    return c.gateway.reloader.reload("test")


@pytest.mark.parametrize("transport", ["auto", "grpc"])
async def test_a_rotated_client_certificate_is_used_by_new_links(
    pki: Pki, tmp_path: Path, transport: str
) -> None:
    """sim-1 takes only the other CA's clients. The gateway's files are replaced with the other
    CA's certificate and the config (now listing sim-1 too) reloaded: the new link to sim-1
    presents the new certificate; the link to sim-0, open before, stays up."""
    files = Pair(tmp_path / "gateway.crt", tmp_path / "gateway.key")
    replace(pki.client.cert_file, files.cert_file)
    replace(pki.client.key_file, files.key_file)
    specs = [
        {"sim": SIM, "tls": sidecar_tls(pki, pki.ca.cert_file)},
        {"sim": SIM, "tls": sidecar_tls(pki, pki.other_ca.cert_file)},
    ]
    yaml = gateway_yaml(pki, transport, files)
    c = Cluster(yaml, specs, tmp_path / "gw.yaml", [0])
    c.start()
    try:
        assert c.gateway is not None
        fleet = c.gateway.fleet
        sim1 = c.sidecars[1]
        assert await info_code(pki, sim1.port, files) is grpc.StatusCode.UNAVAILABLE
        replace(pki.other_client.cert_file, files.cert_file)
        replace(pki.other_client.key_file, files.key_file)
        assert c.config_path is not None
        c.config_path.write_text(c.config_text(yaml, [0, 1]))
        assert c.run(reload(c))
        until(lambda: "sim-1" in fleet.by_name and fleet.by_name["sim-1"].connected, 15, "sim-1")
        assert fleet.by_name["sim-0"].connected
        assert sim1.servicer.links + sim1.tcp_link.open == 1
    finally:
        c.stop()


def test_a_reload_whose_link_certificate_cannot_load_changes_nothing(
    pki: Pki, tmp_path: Path
) -> None:
    c = Cluster(
        gateway_yaml(pki, "auto", pki.client),
        [{"sim": SIM, "tls": sidecar_tls(pki, pki.ca.cert_file)}],
        tmp_path / "gw.yaml",
    )
    c.start()
    try:
        assert c.gateway is not None and c.gateway.reloader is not None
        broken = Pair(pki.client.cert_file, pki.other_client.key_file)  # a key of another cert
        c.gateway.reloader.path.write_text(c.config_text(gateway_yaml(pki, "auto", broken), [0]))
        assert not c.run(reload(c))
        error = c.gateway.reloader.status.last_error or ""
        assert "gateway.link.tls: cannot load the certificate files" in error
        assert c.gateway.config.gateway.link.tls is not None
        assert c.gateway.config.gateway.link.tls.key_file == str(pki.client.key_file)
    finally:
        c.stop()
