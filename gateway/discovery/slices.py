"""EndpointSlices (discovery.k8s.io/v1) as the API serves them, and the sidecars they list.

Only the fields used are declared; the rest of each object is skipped. `members_of` merges a
Service's slices into one set of members (pure): an endpoint is ROUTABLE while it is ready and
not terminating, DRAINING while it is listed otherwise (terminating, still serving or not; or
not ready), and absent once no slice lists it. An endpoint in several slices (it moves between
them) counts once, routable if any slice says so.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from gateway.policy.discovery import Member, MemberState


class _Wire(msgspec.Struct, frozen=True, rename="camel"):
    pass


class ObjectMeta(_Wire, frozen=True):
    name: str = ""
    resource_version: str = ""


class Conditions(_Wire, frozen=True):
    # The API's defaults for null: ready true, serving as ready, terminating false.
    ready: bool | None = None
    serving: bool | None = None
    terminating: bool | None = None


class TargetRef(_Wire, frozen=True):
    kind: str = ""
    name: str = ""


class Endpoint(_Wire, frozen=True):
    addresses: list[str] = []
    conditions: Conditions = Conditions()
    hostname: str | None = None
    target_ref: TargetRef | None = None


class SlicePort(_Wire, frozen=True):
    name: str | None = None
    port: int | None = None


class EndpointSlice(_Wire, frozen=True):
    metadata: ObjectMeta = ObjectMeta()
    address_type: str = ""
    endpoints: list[Endpoint] | None = None  # null when the slice is empty
    ports: list[SlicePort] | None = None


class ListMeta(_Wire, frozen=True):
    resource_version: str = ""


class EndpointSliceList(_Wire, frozen=True):
    metadata: ListMeta = ListMeta()
    items: list[EndpointSlice] | None = None


class Status(_Wire, frozen=True):
    """What an ERROR watch event carries (and the body of a refused request)."""

    code: int = 0
    reason: str = ""
    message: str = ""


class WatchEvent(_Wire, frozen=True):
    type: str
    object: msgspec.Raw


def routable(c: Conditions) -> bool:
    return (c.ready is None or c.ready) and not c.terminating


def _port(s: EndpointSlice, port_name: str) -> int | None:
    for p in s.ports or ():
        if (p.name or "") == port_name and p.port is not None:
            return p.port
    return None


def _address(ip: str, port: int, address_type: str) -> str:
    return f"[{ip}]:{port}" if address_type == "IPv6" else f"{ip}:{port}"


def members_of(
    slices: Iterable[EndpointSlice], port_name: str, address_type: str
) -> dict[str, Member]:
    """The members the slices list (those of another address type, or without the port named
    `port_name`, list none). An endpoint's name: its pod's, else its hostname, else its address."""
    out: dict[str, Member] = {}
    for s in sorted(slices, key=lambda s: s.metadata.name):
        port = _port(s, port_name)
        if s.address_type != address_type or port is None:
            continue
        for e in s.endpoints or ():
            if not e.addresses:
                continue
            address = _address(e.addresses[0], port, address_type)  # the first one counts
            name = (e.target_ref.name if e.target_ref else "") or e.hostname or address
            state = MemberState.ROUTABLE if routable(e.conditions) else MemberState.DRAINING
            have = out.get(name)
            if have is None or (
                have.state is MemberState.DRAINING and state is MemberState.ROUTABLE
            ):
                out[name] = Member(name, address, state)
    return out
