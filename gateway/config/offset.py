"""`--port-offset N`: every port of a local cluster moved together, so that two run side by side.

What moves: the gateway's HTTP and gRPC ports and, for each sidecar `shardgate up` launches (one
with a `launch` section), the port of its address and its `link_port` and `metrics_port`. A port
of 0 (a free one, the kernel's pick) and a link of -1 (off) stay; so does the address of a sidecar
that runs elsewhere. A running gateway reads its file again with the same offset on a reload.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.config.schema import Config, Listen, SidecarEndpoint

LAUNCH_PORTS = ("link_port", "metrics_port")  # a launched sidecar's ports besides its address


def _move(port: int, n: int, setting: str) -> int:
    if port <= 0:
        return port
    if not 0 < port + n < 65536:
        raise ValueError(f"--port-offset {n} moves {setting} from {port} to {port + n}")
    return port + n


def _listen(listen: Listen, n: int, setting: str) -> Listen:
    return msgspec.structs.replace(listen, port=_move(listen.port, n, setting))


def _sidecar(i: int, e: SidecarEndpoint, n: int) -> SidecarEndpoint:
    if e.launch is None:
        return e
    host, _, port = e.address.rpartition(":")
    address = f"{host}:{_move(int(port), n, f'sidecars[{i}].address')}"
    launch: dict[str, Any] = dict(e.launch)
    for key in LAUNCH_PORTS:
        value = launch.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            launch[key] = _move(value, n, f"sidecars[{i}].launch.{key}")
    return msgspec.structs.replace(e, address=address, launch=launch)


def moved(config: Config, n: int) -> Config:
    """`config` with its local cluster's ports moved by `n` (ValueError: one would leave
    1-65535, named)."""
    if n == 0:
        return config
    s = config.gateway
    gateway = msgspec.structs.replace(
        s,
        http=_listen(s.http, n, "gateway.http.port"),
        grpc=_listen(s.grpc, n, "gateway.grpc.port"),
    )
    sidecars = [_sidecar(i, e, n) for i, e in enumerate(config.sidecars)]
    return msgspec.structs.replace(config, gateway=gateway, sidecars=sidecars)
