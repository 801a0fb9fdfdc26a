"""Builders for routing tests: real EndpointInfo/Load (as the runtime passes them), replicas."""

from __future__ import annotations

from collections.abc import Iterable

from gateway.policy.health import Health
from gateway.policy.routing.snapshot import EndpointSnapshot, Replica, RequestFeatures
from gateway.upstream.convert import EndpointInfo, Load

UP, SUSPECT, DOWN = Health.UP, Health.SUSPECT, Health.DOWN


def info(
    *,
    models: tuple[str, ...] = ("m",),
    loras: tuple[str, ...] = (),
    group: str = "",
    rank: int = 0,
    world: int = 1,
    max_num_seqs: int = 8,
) -> EndpointInfo:
    return EndpointInfo(
        sidecar_id="sc",
        backend="sim",
        models=dict.fromkeys(models, 4096),
        loras={m: loras for m in models},
        group=group,
        rank=rank,
        world_size=world,
        max_num_seqs=max_num_seqs,
        heartbeat_interval_s=0.5,
    )


def load(
    *, running: int = 0, waiting: int = 0, kv: float = 0.0, ready: bool = True, slots: int = 0
) -> Load:
    return Load(
        seq=1, running=running, waiting=waiting, kv_usage=kv, max_num_seqs=slots, ready=ready
    )


def snap(
    name: str,
    *,
    group: str = "",
    rank: int = 0,
    world: int = 1,
    health: Health = UP,
    ready: bool = True,
    announced: bool = True,
    reported: bool = True,
    models: tuple[str, ...] = ("m",),
    running: int = 0,
    inflight: int = 0,
    stalled: bool = False,
) -> EndpointSnapshot:
    return EndpointSnapshot(
        name=name,
        address=f"{name}:1",
        info=info(models=models, group=group, rank=rank, world=world) if announced else None,
        load=load(ready=ready, running=running) if reported else None,
        health=health,
        inflight=inflight,
        stalled=stalled,
    )


def rep(
    name: str,
    *,
    running: int = 0,
    waiting: int = 0,
    inflight: int = 0,
    slots: int = 8,
    kv: float = 0.0,
    models: tuple[str, ...] = ("m",),
    loras: tuple[str, ...] = (),
    health: Health = UP,
    whole: bool = True,
    ready: bool = True,
) -> Replica:
    return Replica(
        name=name,
        address=f"{name}:1",
        head=name,
        members=(name,),
        models=dict.fromkeys(models, 4096),
        loras={m: loras for m in models},
        whole=whole,
        health=health,
        ready=ready,
        max_num_seqs=slots,
        running=running,
        waiting=waiting,
        kv_usage=kv,
        inflight=inflight,
    )


def req(
    model: str = "m", *, lora: str = "", hashes: tuple[int, ...] = (), session: str = ""
) -> RequestFeatures:
    return RequestFeatures(model, lora, hashes, session)


def names(replicas: Iterable[Replica]) -> list[str]:
    return [r.name for r in replicas]
