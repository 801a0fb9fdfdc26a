"""What a model's engines honour is what every replica's head announces: the other ranks of a
shard group run no requests and announce nothing of the kind."""

from __future__ import annotations

from shardgate.v1 import engine_pb2 as pb
from shardgate.v1.params import PROTOCOL_VERSION

from gateway.config.schema import LinkSettings, SidecarEndpoint
from gateway.runtime.events import EventQueue
from gateway.runtime.fleet import Fleet


def info(name: str, rank: int, world: int, caps: list[str], group: str = "") -> pb.InfoReply:
    return pb.InfoReply(
        sidecar_id=name,
        models=[pb.ModelCard(name="m", max_model_len=64, loras=["a1"] if rank == 0 else [])],
        group=group,
        rank=rank,
        world_size=world,
        max_num_seqs=4,
        heartbeat_interval_s=1000.0,
        protocol_version=PROTOCOL_VERSION,
        capabilities=caps,
    )


def test_capabilities_come_from_the_heads_of_the_replicas() -> None:
    events = EventQueue(schedule=lambda fn: None)
    names = ["head", "rank1", "single"]
    endpoints = [
        SidecarEndpoint(name=n, address=f"127.0.0.1:{9100 + i}") for i, n in enumerate(names)
    ]
    fleet = Fleet(endpoints, LinkSettings(), events=events)
    announced = {
        "head": info("head", 0, 2, ["min_p", "logit_bias"], group="g"),
        "rank1": info("rank1", 1, 2, [], group="g"),
        "single": info("single", 0, 1, ["min_p"]),
    }
    for link in fleet.links:
        i = announced[link.name]
        link.announced(i, pb.LoadReport(seq=1, max_num_seqs=4, ready=True))
    events.drain()
    assert fleet.capabilities["m"] == frozenset({"min_p"})  # head ∩ single; rank 1 not counted
    assert fleet.adapters == {"a1": "m"}
