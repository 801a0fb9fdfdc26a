"""Who may call /admin/*: the holder of `gateway.admin_key`, or, with no key set, loopback only."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from engine_sidecar.backends.sim import SimConfig
from tests.integration.cluster import Cluster

SIM = {"sim": SimConfig(model="sim-llama", profile="instant")}


def start(tmp_path: Path, gateway: str) -> Cluster:
    c = Cluster(f"gateway: {{{gateway}}}", [SIM], tmp_path / "gw.yaml")
    c.start()
    return c


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[Cluster]:
    c = start(tmp_path, "admin_key: sk-admin, watch_config: false")
    yield c
    c.stop()


@pytest.fixture
def open_to_all_interfaces(tmp_path: Path) -> Iterator[Cluster]:
    """No admin key, and the HTTP API listens on every interface (not only loopback)."""
    c = start(tmp_path, "http: {host: 0.0.0.0, port: 0}, watch_config: false")
    yield c
    c.stop()


def non_loopback_address() -> str | None:
    """An address of this machine that is not loopback, if it has one."""
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
    except OSError:
        infos = []
    addresses = [str(info[4][0]) for info in infos]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.254", 9))  # no packet is sent: this only picks a route
            addresses.append(str(s.getsockname()[0]))
        except OSError:
            pass
    return next((a for a in addresses if not a.startswith("127.")), None)


def get_config(url: str, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return httpx.get(f"{url}/admin/config", headers=headers, timeout=10)


@pytest.mark.parametrize("key", [None, "sk-wrong", "sk-admin2", "sk-admi"])
def test_with_a_key_a_missing_or_wrong_key_is_401(keyed: Cluster, key: str | None) -> None:
    r = get_config(keyed.http_url, key)
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "authentication_error"
    reload = httpx.post(f"{keyed.http_url}/admin/reload", timeout=10)
    assert reload.status_code == 401


def test_with_a_key_the_right_key_is_served_and_the_key_is_not_shown(keyed: Cluster) -> None:
    r = get_config(keyed.http_url, "sk-admin")
    assert r.status_code == 200
    body = r.json()
    assert body["version"] == 1
    assert body["config"]["gateway"]["admin_key"] == "***"
    assert "sk-admin" not in r.text
    reload = httpx.post(
        f"{keyed.http_url}/admin/reload", headers={"Authorization": "Bearer sk-admin"}, timeout=10
    )
    assert reload.status_code == 200 and reload.json()["ok"] is True


def test_without_a_key_loopback_is_served_and_other_peers_are_403(
    open_to_all_interfaces: Cluster,
) -> None:
    c = open_to_all_interfaces
    assert c.gateway is not None
    port = c.gateway.http_port
    assert get_config(f"http://127.0.0.1:{port}").status_code == 200
    address = non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address to call from")
    r = get_config(f"http://{address}:{port}")
    assert r.status_code == 403
    assert r.json()["error"]["type"] == "permission_error"
    assert httpx.post(f"http://{address}:{port}/admin/reload", timeout=10).status_code == 403
    # The API itself is not loopback-only: the same peer is served outside /admin.
    assert httpx.get(f"http://{address}:{port}/healthz", timeout=10).status_code == 200
