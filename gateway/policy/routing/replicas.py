"""Replica assembly: from sidecar snapshots to replicas and model pools.

Sidecars announcing the same non-empty `group` form one replica (tensor/pipeline parallel across
nodes); an empty group makes a one-sidecar replica (its rank and world size are not looked at).
Only rank 0 takes requests: the replica's address is rank 0's. A group is whole while every rank
0..world_size-1 is present and not DOWN; only a whole, ready replica is routable. A stalled rank
(its engine holds work and makes no progress) counts as SUSPECT, not DOWN: the replica is
avoided while a better one is left, and taken out only by ejection, which the pool's cap bounds
(policy/ejection.py). A group whose rank 0 is unknown is no replica at all (nothing can be sent
to it); its sidecars are `stray`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gateway.policy.health import Health
from gateway.policy.routing.snapshot import AnnouncedInfo, EndpointSnapshot, Replica


@dataclass(frozen=True, slots=True)
class Assembly:
    replicas: tuple[Replica, ...]  # in the order their rank-0 sidecars came
    by_name: Mapping[str, Replica]
    pools: Mapping[str, tuple[Replica, ...]]  # model -> replicas serving it (routable or not)
    # Sidecars in no replica: never announced, group without rank 0, rank outside the group's
    # world size, world size disagreeing with rank 0's, a second sidecar for a rank, or a
    # replica name already taken.
    stray: tuple[str, ...]

    def pool(self, model: str) -> tuple[Replica, ...]:
        return self.pools.get(model, ())

    def knows(self, model: str) -> bool:
        return model in self.pools


def assemble(endpoints: Iterable[EndpointSnapshot]) -> Assembly:
    groups: dict[str, list[EndpointSnapshot]] = {}
    stray: list[str] = []
    for e in endpoints:
        if e.info is None:
            stray.append(e.name)
        else:
            groups.setdefault(e.info.group or "\0" + e.name, []).append(e)
    replicas: list[Replica] = []
    by_name: dict[str, Replica] = {}
    for key, members in groups.items():
        r = _standalone(members[0]) if key[0] == "\0" else _group(key, members, stray)
        if r is None:
            continue
        if r.name in by_name:
            stray.extend(r.members)
            continue
        replicas.append(r)
        by_name[r.name] = r
    pools: dict[str, list[Replica]] = {}
    for r in replicas:
        for model in r.models:
            pools.setdefault(model, []).append(r)
    return Assembly(
        replicas=tuple(replicas),
        by_name=by_name,
        pools={m: tuple(rs) for m, rs in pools.items()},
        stray=tuple(stray),
    )


def broken_since(previous: Assembly, current: Assembly) -> list[Replica]:
    """Replicas whole in `previous` that are not whole in `current` (or gone, or with another
    rank-0 sidecar): the runtime migrates the requests in flight on their `head`."""
    out = []
    for r in previous.replicas:
        if not r.whole:
            continue
        now = current.by_name.get(r.name)
        if now is None or not now.whole or now.head != r.head:
            out.append(r)
    return out


def _health(e: EndpointSnapshot) -> Health:
    """A stalled engine's live sidecar is SUSPECT at best."""
    return max(e.health, Health.SUSPECT) if e.stalled else e.health


def _standalone(e: EndpointSnapshot) -> Replica:
    info = _info(e)
    alive = e.health is not Health.DOWN
    return _replica(e.name, e, info, (e,), 1, () if alive else (0,), _health(e))


def _group(name: str, members: list[EndpointSnapshot], stray: list[str]) -> Replica | None:
    heads = [e for e in members if _info(e).rank == 0]
    if not heads:
        stray.extend(e.name for e in members)
        return None
    head = min(heads, key=lambda e: e.health)  # a live rank 0 over a dead duplicate
    world = _info(head).world_size
    ranks: dict[int, EndpointSnapshot] = {0: head}
    for e in members:
        if e is head:
            continue
        info = _info(e)
        rank = info.rank
        if info.world_size != world or not 0 < rank < world:
            stray.append(e.name)
            continue
        held = ranks.get(rank)
        if held is None:
            ranks[rank] = e
        elif e.health < held.health:  # a live duplicate replaces a dead one
            ranks[rank] = e
            stray.append(held.name)
        else:
            stray.append(e.name)
    present = tuple(ranks[r] for r in sorted(ranks))
    missing = tuple(r for r in range(world) if r not in ranks or ranks[r].health is Health.DOWN)
    worst = max(_health(e) for e in present)
    return _replica(name, head, _info(head), present, world, missing, worst)


def _replica(
    name: str,
    head: EndpointSnapshot,
    info: AnnouncedInfo,
    present: tuple[EndpointSnapshot, ...],
    world: int,
    missing: tuple[int, ...],
    health: Health,
) -> Replica:
    load = head.load
    return Replica(
        name=name,
        address=head.address,
        head=head.name,
        members=tuple(e.name for e in present),
        world_size=world,
        models=info.models,
        loras=info.loras,
        whole=not missing,
        missing_ranks=missing,
        health=health,
        ready=all(e.load is not None and e.load.ready for e in present),
        max_num_seqs=(load.max_num_seqs if load is not None else 0) or info.max_num_seqs,
        running=load.running if load is not None else 0,
        waiting=load.waiting if load is not None else 0,
        kv_usage=load.kv_usage if load is not None else 0.0,
        inflight=head.inflight,
    )


def _info(e: EndpointSnapshot) -> AnnouncedInfo:
    assert e.info is not None  # grouped sidecars have announced themselves
    return e.info
