from __future__ import annotations

import pytest

from gateway.config.discovery import KubernetesDiscovery
from gateway.config.loader import ConfigError, parse


def test_static_is_the_default_and_keeps_the_list() -> None:
    c = parse("sidecars: [{name: a, address: '127.0.0.1:50061'}]\n")
    assert c.discovery.mode == "static" and [s.name for s in c.sidecars] == ["a"]


def test_kubernetes_defaults() -> None:
    c = parse("discovery: {mode: kubernetes, kubernetes: {service: shardgate-sidecar}}\n")
    k = c.discovery.kubernetes
    assert k == KubernetesDiscovery(service="shardgate-sidecar")
    assert (k.port_name, k.resync_s, k.address_type) == ("grpc", 60.0, "IPv4")


def test_an_srv_name_needs_no_port() -> None:
    c = parse("discovery: {mode: dns, dns: {name: _grpc._tcp.s.ns.svc, srv: true}}\n")
    assert c.discovery.dns is not None and c.discovery.dns.port is None


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("discovery: {mode: dns}\n", "mode dns needs a `dns:` section"),
        ("discovery: {mode: kubernetes}\n", "mode kubernetes needs a `kubernetes:` section"),
        ("discovery: {mode: consul}\n", "discovery.mode"),
        ("discovery: {mode: dns, dns: {name: x}}\n", r"`port` is needed \(or `srv: true`\)"),
        ("discovery: {mode: dns, dns: {name: x, port: 0}}\n", "discovery.dns.port"),
        (
            "discovery: {mode: kubernetes, kubernetes: {service: s, resync: 5}}\n",
            r"unknown field `resync` - at `\$.discovery.kubernetes`",
        ),
        (
            "discovery: {mode: dns, dns: {name: x, port: 1}}\n"
            "sidecars: [{name: a, address: '127.0.0.1:50061'}]\n",
            "sidecars: listed, but discovery mode is dns",
        ),
    ],
)
def test_bad_discovery_config_names_the_problem(text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        parse(text)
