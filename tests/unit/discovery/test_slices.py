from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.discovery.slices import EndpointSlice, members_of
from gateway.policy.discovery import Member, MemberState

R, D = MemberState.ROUTABLE, MemberState.DRAINING


def _ep(ip: str, pod: str | None = None, **conditions: bool | None) -> dict[str, Any]:
    e: dict[str, Any] = {"addresses": [ip], "conditions": conditions}
    if pod is not None:
        e["targetRef"] = {"kind": "Pod", "name": pod, "namespace": "ns"}
    return e


def _slice(name: str, *endpoints: dict[str, Any], port: int = 50061, **kw: Any) -> EndpointSlice:
    raw = {
        "kind": "EndpointSlice",
        "apiVersion": "discovery.k8s.io/v1",
        "metadata": {"name": name, "resourceVersion": "7", "labels": {"x": "y"}},
        "addressType": kw.get("address_type", "IPv4"),
        "endpoints": list(endpoints) or None,
        "ports": kw.get("ports", [{"name": "grpc", "port": port, "protocol": "TCP"}]),
    }
    return msgspec.convert(raw, EndpointSlice)


@pytest.mark.parametrize(
    ("conditions", "state"),
    [
        ({"ready": True, "serving": True, "terminating": False}, R),
        ({}, R),  # null conditions: ready, not terminating
        ({"ready": False, "serving": True, "terminating": True}, D),  # terminating, serving
        ({"ready": False, "serving": False, "terminating": True}, D),
        ({"ready": True, "serving": True, "terminating": True}, D),  # publishNotReadyAddresses
        ({"ready": False, "serving": False, "terminating": False}, D),  # not ready
    ],
)
def test_conditions(conditions: dict[str, bool], state: MemberState) -> None:
    got = members_of([_slice("s1", _ep("10.0.0.1", "pod-a", **conditions))], "grpc", "IPv4")
    assert got == {"pod-a": Member("pod-a", "10.0.0.1:50061", state)}


def test_merged_across_slices_and_a_duplicate_counts_once_routable_if_any() -> None:
    # pod-b and pod-c are each in both slices (moving between them), ready in one only.
    a, b, c = (
        _ep("10.0.0.1", "pod-a"),
        _ep("10.0.0.2", "pod-b", ready=False),
        _ep("10.0.0.3", "pod-c"),
    )
    s1 = _slice("s1", a, b, c)
    s2 = _slice("s2", _ep("10.0.0.2", "pod-b"), _ep("10.0.0.3", "pod-c", ready=False), port=50071)
    got = members_of([s2, s1], "grpc", "IPv4")
    assert got == {
        "pod-a": Member("pod-a", "10.0.0.1:50061", R),
        "pod-b": Member("pod-b", "10.0.0.2:50071", R),
        "pod-c": Member("pod-c", "10.0.0.3:50061", R),
    }


def test_slices_without_the_port_or_of_another_address_type_list_nothing() -> None:
    other_port = _slice("s1", _ep("10.0.0.1", "a"), ports=[{"name": "link", "port": 1}])
    v6 = _slice("s2", _ep("fd00::1", "b"), address_type="IPv6")
    empty = _slice("s3")
    assert members_of([other_port, v6, empty], "grpc", "IPv4") == {}
    assert members_of([v6], "grpc", "IPv6") == {"b": Member("b", "[fd00::1]:50061", R)}


def test_name_falls_back_to_hostname_then_address() -> None:
    host = _ep("10.0.0.1")
    host["hostname"] = "sidecar-0"
    got = members_of([_slice("s1", host, _ep("10.0.0.2"))], "grpc", "IPv4")
    assert set(got) == {"sidecar-0", "10.0.0.2:50061"}
