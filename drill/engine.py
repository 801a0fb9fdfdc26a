"""The two sidecar RPCs a drill calls directly: Info (who is this sidecar) and SetFaults.

Both on a fresh channel with a deadline, so that a stopped or dead sidecar costs the drill at
most `timeout_s`.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from shardgate.v1 import engine_pb2 as epb
from shardgate.v1 import engine_pb2_grpc as epb_grpc


@dataclass(frozen=True, slots=True)
class SidecarInfo:
    """A sidecar of the drilled cluster, as it announces itself."""

    name: str  # the gateway config's name for it
    address: str  # host:port
    group: str
    rank: int
    world_size: int

    @property
    def standalone(self) -> bool:
        return not self.group


@dataclass(frozen=True, slots=True)
class FaultSettings:
    """What SetFaults sets (the defaults clear every fault)."""

    stop_heartbeats: bool = False
    slow_token_s: float = 0.0
    hang_after_tokens: int | None = None
    crash_after_tokens: int | None = None
    error_rate: float = 0.0


async def info(name: str, address: str, timeout_s: float = 5.0) -> SidecarInfo:
    async with grpc.aio.insecure_channel(address) as ch:
        reply = await epb_grpc.EngineStub(ch).Info(
            epb.InfoRequest(), timeout=timeout_s, wait_for_ready=True
        )
    return SidecarInfo(name, address, reply.group, reply.rank, max(reply.world_size, 1))


async def set_faults(address: str, faults: FaultSettings, timeout_s: float = 5.0) -> None:
    """Raises grpc.aio.AioRpcError (PERMISSION_DENIED: the sidecar does not allow it)."""
    msg = epb.Faults(
        stop_heartbeats=faults.stop_heartbeats,
        slow_token_s=faults.slow_token_s,
        error_rate=faults.error_rate,
    )
    if faults.hang_after_tokens is not None:
        msg.hang_after_tokens = faults.hang_after_tokens
    if faults.crash_after_tokens is not None:
        msg.crash_after_tokens = faults.crash_after_tokens
    async with grpc.aio.insecure_channel(address) as ch:
        await epb_grpc.EngineStub(ch).SetFaults(msg, timeout=timeout_s)
