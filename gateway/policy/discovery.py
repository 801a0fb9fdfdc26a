"""The sidecar set a discovery keeps: what changes when a new view of the endpoints arrives.

A member is ROUTABLE (connected, takes requests) or DRAINING (still listed by its source, as
terminating or not ready: it takes no new request, its in-flight ones finish). `diff(current,
discovered)` says which endpoints to connect (`add`), which to stop routing to (`drain`), and
which to forget (`remove`: gone from the view, or listed at a new address, which is then
taken as a new endpoint); `members` is the set after it. An endpoint
first seen DRAINING was never routed to: it is not taken in. Pure: no clock, no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


class MemberState(enum.Enum):
    ROUTABLE = "routable"
    DRAINING = "draining"


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    address: str  # host:port
    state: MemberState = MemberState.ROUTABLE


@dataclass(frozen=True, slots=True)
class Plan:
    add: tuple[Member, ...] = ()
    drain: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    members: Mapping[str, Member] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.add or self.drain or self.remove)

    def routable(self) -> list[Member]:
        return [m for m in self.members.values() if m.state is MemberState.ROUTABLE]


def diff(current: Mapping[str, Member], discovered: Mapping[str, Member]) -> Plan:
    """The changes from `current` (the set in force) to `discovered` (a complete new view)."""
    add: list[Member] = []
    drain: list[str] = []
    remove: list[str] = []
    members: dict[str, Member] = {}
    for name in sorted(current.keys() | discovered.keys()):
        old, new = current.get(name), discovered.get(name)
        if new is None:
            assert old is not None
            remove.append(name)  # gone from the view: drained (when it was routable), dropped
            continue
        if old is not None and old.address != new.address:
            remove.append(name)  # replaced: the old address goes, the new one is taken as new
            old = None
        routable = new.state is MemberState.ROUTABLE
        if old is None:
            if routable:
                add.append(new)
                members[name] = new
            continue
        was_routable = old.state is MemberState.ROUTABLE
        if was_routable and not routable:
            drain.append(name)
        elif routable and not was_routable:
            add.append(new)
        members[name] = new
    return Plan(tuple(add), tuple(drain), tuple(remove), members)
