"""A sidecar with `tls` over loopback: every port it serves (gRPC Engine and health, the TCP
link, metrics) answers only clients with a certificate its CA signed; a gateway without `tls`
cannot link to it; rotated files are used from the next connection on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import msgspec
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from shardgate.v1 import engine_pb2 as pb
from shardgate.v1 import engine_pb2_grpc as pb_grpc
from shardgate.v1 import wire

from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.config import SidecarConfig, SidecarTls
from engine_sidecar.server import Sidecar
from gateway.config.schema import LinkSettings, LinkTls
from gateway.upstream.grpc_link import LINK_METADATA
from gateway.upstream.link import EngineLink
from tests.certs import Pair, Pki, make_pki, replace
from tests.integration.poll import until_async

GET_METRICS = b"GET /metrics HTTP/1.0\r\n\r\n"
CLIENTS = ["plaintext", "no certificate", "another CA's certificate"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def sidecar_tls(pki: Pki) -> SidecarTls:
    return SidecarTls(
        cert_file=str(pki.server.cert_file),
        key_file=str(pki.server.key_file),
        client_ca_file=str(pki.ca.cert_file),
    )


async def start(tls: SidecarTls) -> Sidecar:
    cfg = SidecarConfig(
        name="tls",
        port=0,
        metrics_port=0,
        allow_fault_injection=True,
        sim=SimConfig(profile="fast"),
        tls=tls,
    )
    s = Sidecar(cfg)
    await s.start()
    return s


@pytest.fixture
async def sidecar(pki: Pki) -> AsyncIterator[Sidecar]:
    s = await start(sidecar_tls(pki))
    yield s
    await s.stop(0.5)


def client_pair(pki: Pki, client: str) -> Pair | None:
    return {"no certificate": None, "another CA's certificate": pki.other_client}.get(
        client, pki.client
    )


def ssl_context(pki: Pki, pair: Pair | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki.ca.cert_file)
    if pair is not None:
        ctx.load_cert_chain(pair.cert_file, pair.key_file)
    return ctx


def channel(pki: Pki, port: int, client: str) -> grpc.aio.Channel:
    target = f"127.0.0.1:{port}"
    if client == "plaintext":
        return grpc.aio.insecure_channel(target)
    pair = client_pair(pki, client)
    root = pki.ca.cert_file.read_bytes()
    if pair is None:
        return grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(root))
    key, cert = pair.key_file.read_bytes(), pair.cert_file.read_bytes()
    return grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(root, key, cert))


def one_frame(data: bytes) -> bool:
    return bool(wire.FrameReader().feed(data))


async def exchange(
    port: int,
    ctx: ssl.SSLContext | None,
    payload: bytes,
    complete: Callable[[bytes], bool] = one_frame,
) -> bytes:
    """Connect (over TLS with `ctx`), send `payload`, and read what comes back until it is
    `complete` or the sidecar closes the connection; b"" when the connection is refused (at
    the handshake, or right after it)."""
    try:
        async with asyncio.timeout(10):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
            try:
                writer.write(payload)
                got = b""
                while chunk := await reader.read(1 << 16):
                    got += chunk
                    if complete(got):
                        break
                return got
            finally:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
    except (ssl.SSLError, ConnectionError):
        return b""


def scraped(data: bytes) -> bool:
    """An HTTP/1.0 answer is whole when the server closes the connection."""
    return False


def announced(data: bytes) -> str:
    """The model a TCP link's first frame announces."""
    body = wire.FrameReader().feed(data)[0]
    info = msgspec.msgpack.decode(body, type=wire.Down).info
    return str(pb.InfoReply.FromString(info).models[0].name)


async def grpc_codes(pki: Pki, port: int, client: str) -> list[grpc.StatusCode]:
    """What each of the sidecar's services answers this client: Info, SetFaults (fault
    injection), Link, and health."""
    codes = []
    async with channel(pki, port, client) as ch:
        stub = pb_grpc.EngineStub(ch)
        calls = [
            stub.Info(pb.InfoRequest(), timeout=5),
            stub.SetFaults(pb.Faults(), timeout=5),
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5),
        ]
        for call in calls:
            try:
                await call
                codes.append(grpc.StatusCode.OK)
            except grpc.aio.AioRpcError as e:
                codes.append(e.code())
        link = stub.Link(metadata=LINK_METADATA, timeout=5)
        try:
            first = await link.read()
            ok = first is not grpc.aio.EOF and first.HasField("info")
            codes.append(grpc.StatusCode.OK if ok else grpc.StatusCode.UNKNOWN)
        except grpc.aio.AioRpcError as e:
            codes.append(e.code())
        link.cancel()
    return codes


async def test_the_gateways_certificate_opens_every_port(sidecar: Sidecar, pki: Pki) -> None:
    ctx = ssl_context(pki, pki.client)
    assert await grpc_codes(pki, sidecar.port, "certified") == [grpc.StatusCode.OK] * 4
    assert announced(await exchange(sidecar.link_port, ctx, wire.MAGIC)) == "sim-llama"
    metrics = await exchange(sidecar.metrics_port, ctx, GET_METRICS, scraped)
    assert metrics.startswith(b"HTTP/1.0 200 OK")


@pytest.mark.parametrize("client", CLIENTS)
async def test_other_clients_get_nothing_from_any_port(
    sidecar: Sidecar, pki: Pki, client: str
) -> None:
    codes = await grpc_codes(pki, sidecar.port, client)
    assert codes == [grpc.StatusCode.UNAVAILABLE] * 4
    ctx = None if client == "plaintext" else ssl_context(pki, client_pair(pki, client))
    assert await exchange(sidecar.link_port, ctx, wire.MAGIC) == b""
    assert await exchange(sidecar.metrics_port, ctx, GET_METRICS, scraped) == b""
    assert sidecar.servicer.links == 0
    assert sidecar.tcp_link.open == 0


def link_settings(pki: Pki, tls: bool) -> LinkSettings:
    files = LinkTls(
        cert_file=str(pki.client.cert_file),
        key_file=str(pki.client.key_file),
        ca_file=str(pki.ca.cert_file),
    )
    return LinkSettings(connect_timeout_s=1.0, reconnect_max_s=0.5, tls=files if tls else None)


def failed_attempts(caplog: pytest.LogCaptureFixture, name: str) -> int:
    """The link sessions of `name` that ended in an error, as the gateway logs them (a link
    that never came up may be waiting for its sidecar to start: said at INFO)."""
    caplog.set_level(logging.INFO, logger="gateway.upstream.link")
    heads = (f"link {name} (", f"link {name}: waiting for sidecar")
    return sum(
        r.name == "gateway.upstream.link" and r.getMessage().startswith(heads)
        for r in caplog.records
    )


@pytest.mark.parametrize("transport", ["auto", "grpc"])
async def test_a_gateway_without_tls_cannot_link(
    sidecar: Sidecar, pki: Pki, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    plain = EngineLink("plain", f"127.0.0.1:{sidecar.port}", link_settings(pki, tls=False))
    certified = EngineLink("tls", f"127.0.0.1:{sidecar.port}", link_settings(pki, tls=True))
    for link in (plain, certified):
        link.settings = msgspec.structs.replace(link.settings, transport=transport)
        link.start()
    try:
        assert await certified.wait_connected(10)
        assert certified.transport == ("tcp" if transport == "auto" else "grpc")
        await until_async(lambda: failed_attempts(caplog, "plain") >= 2, 15, "two attempts")
        assert not plain.connected and not plain._connected_once.is_set()
        assert sidecar.servicer.links + sidecar.tcp_link.open == 1  # the certified one's
    finally:
        await plain.close()
        await certified.close()


@pytest.mark.parametrize("transport", ["auto", "grpc"])
async def test_server_name_is_what_the_sidecars_certificate_is_checked_against(
    pki: Pki, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A sidecar whose certificate names a service, not its address: a gateway checking the
    address refuses it; one told the name links."""
    named = pki.ca.issue("named", server=True, hosts=("sidecar.shardgate.internal",))
    tls = SidecarTls(
        cert_file=str(named.cert_file),
        key_file=str(named.key_file),
        client_ca_file=str(pki.ca.cert_file),
    )
    s = await start(tls)
    settings = msgspec.structs.replace(link_settings(pki, tls=True), transport=transport)
    assert settings.tls is not None
    by_name = msgspec.structs.replace(
        settings,
        tls=msgspec.structs.replace(settings.tls, server_name="sidecar.shardgate.internal"),
    )
    by_address = EngineLink("by-address", f"127.0.0.1:{s.port}", settings)
    named_link = EngineLink("by-name", f"127.0.0.1:{s.port}", by_name)
    for link in (by_address, named_link):
        link.start()
    try:
        assert await named_link.wait_connected(10)
        assert named_link.transport == ("tcp" if transport == "auto" else "grpc")
        await until_async(lambda: failed_attempts(caplog, "by-address") >= 2, 15, "attempts")
        assert not by_address._connected_once.is_set()
    finally:
        await by_address.close()
        await named_link.close()
        await s.stop(0.5)


async def test_rotated_files_are_used_from_the_next_connection(pki: Pki, tmp_path: Path) -> None:
    """The sidecar's CA file is replaced by another CA's: the next connections need a
    certificate of the new CA, on every port."""
    files = tmp_path / "tls"
    files.mkdir()
    for src in (pki.server.cert_file, pki.server.key_file, pki.ca.cert_file):
        replace(src, files / src.name)
    tls = SidecarTls(
        cert_file=str(files / pki.server.cert_file.name),
        key_file=str(files / pki.server.key_file.name),
        client_ca_file=str(files / pki.ca.cert_file.name),
    )
    s = await start(tls)
    try:
        assert await grpc_codes(pki, s.port, "certified") == [grpc.StatusCode.OK] * 4
        replace(pki.other_ca.cert_file, Path(tls.client_ca_file))
        assert await grpc_codes(pki, s.port, "certified") == [grpc.StatusCode.UNAVAILABLE] * 4
        old, new = ssl_context(pki, pki.client), ssl_context(pki, pki.other_client)
        assert await exchange(s.link_port, old, wire.MAGIC) == b""
        assert announced(await exchange(s.link_port, new, wire.MAGIC)) == "sim-llama"
        metrics = await exchange(s.metrics_port, new, GET_METRICS, scraped)
        assert metrics.startswith(b"HTTP/1.0 200 OK")
        codes = await grpc_codes(pki, s.port, "another CA's certificate")
        assert codes == [grpc.StatusCode.OK] * 4
    finally:
        await s.stop(0.5)
