"""The sidecar's typed configuration."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from engine_sidecar.backends.openai.config import OpenAIConfig
from engine_sidecar.backends.sim.config import SimConfig
from engine_sidecar.backends.triton.config import TritonConfig
from engine_sidecar.backends.vllm.config import VllmConfig
from gateway.collector import CollectorSettings

Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]


class SidecarTls(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Mutual TLS on every port the sidecar serves: its certificate, and the CA that the
    gateway's client certificate must be signed by. The files are read again when they change."""

    cert_file: str
    key_file: str
    client_ca_file: str


class SidecarConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: str = "sidecar"
    host: str = "127.0.0.1"
    port: Port = 50061
    backend: Literal["sim", "vllm", "triton", "openai"] = "sim"
    sim: SimConfig = SimConfig()
    vllm: VllmConfig | None = None
    triton: TritonConfig | None = None
    openai: OpenAIConfig | None = None
    # Shard group: a replica spanning several sidecars (TP/PP across nodes).
    group: str = ""
    rank: Annotated[int, msgspec.Meta(ge=0)] = 0
    world_size: Annotated[int, msgspec.Meta(ge=1)] = 1
    # The Link over plain TCP (shardgate/v1/wire.py, announced in Info), lighter per engine step
    # than the gRPC Link: 0 takes a free port, -1 serves the gRPC Link only.
    link_port: Annotated[int, msgspec.Meta(ge=-1, le=65535)] = 0
    # A gateway whose TCP link has not taken our writes for this long is gone.
    link_write_timeout_s: PositiveFloat = 10.0
    # Prometheus /metrics (vLLM-style names) on this port of `host`; absent: off.
    metrics_port: Port | None = None
    heartbeat_interval_s: PositiveFloat = 0.5
    drain_grace_s: Annotated[float, msgspec.Meta(ge=0)] = 10.0
    # Let drills change faults at run time through the SetFaults RPC.
    allow_fault_injection: bool = False
    # Deltas a link may hold for a gateway that stopped reading before the link is dropped.
    max_link_pending: Annotated[int, msgspec.Meta(gt=0)] = 1_000_000
    # Absent: every port is plaintext (for a trusted network only).
    tls: SidecarTls | None = None
    # The process's garbage collector, as the gateway's (`gateway.gc`): its collections walk
    # every chunk a stream decodes (bench/RESULTS.md, issue 27).
    gc: CollectorSettings = CollectorSettings()

    def __post_init__(self) -> None:
        if self.rank >= self.world_size:
            raise ValueError(f"rank {self.rank} must be below world_size {self.world_size}")
        if self.backend != "sim" and getattr(self, self.backend) is None:
            raise ValueError(f"backend {self.backend!r} needs a `{self.backend}:` section")


def decode(obj: Any, path: str = "") -> SidecarConfig:
    """Build a config from plain data; errors name the bad field (`$.sim.profile`)."""
    try:
        return msgspec.convert(obj, SidecarConfig)
    except msgspec.ValidationError as e:
        raise ValueError(f"{path}{e}") from None
