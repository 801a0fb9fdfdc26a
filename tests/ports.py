"""Loopback ports for servers that a test starts in another process.

A port the kernel hands out for `bind(("127.0.0.1", 0))` comes from its ephemeral range
(ip_local_port_range), the range every other socket bound to port 0 and every outgoing
connection draws from too. Between the moment a test picks such a port and the moment its child
process binds it, another listener can take it (a sidecar's own TCP link binds port 0); the child
then fails to bind, and the test talks to the wrong server. These ports are picked below that
range, where only explicit binds compete, and none is handed out twice by one test process.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10000
_given: set[int] = set()
_rng = random.Random()


def _ephemeral_start() -> int:
    try:
        return int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket() as s:  # (no SO_REUSEADDR: a port in TIME_WAIT is not free either)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(also_free_at: int = 0) -> int:
    """A free loopback port outside the ephemeral range; with `also_free_at`, port + that offset
    is free and outside it too (a Redis Cluster node listens on port + 10000)."""
    top = _ephemeral_start() - also_free_at
    if top - _LOWEST < 1000:
        raise RuntimeError(f"no room for test ports below the ephemeral range ({_RANGE})")
    for _ in range(1000):
        port = _rng.randrange(_LOWEST, top)
        if port in _given or not _bindable(port):
            continue
        if also_free_at and not _bindable(port + also_free_at):
            continue
        _given.add(port)
        return port
    raise RuntimeError("no free loopback port found")


def free_ports(n: int) -> list[int]:
    return [free_port() for _ in range(n)]
