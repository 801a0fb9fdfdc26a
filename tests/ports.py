"""Loopback ports for servers that a test starts in another process.

A port the kernel hands out for `bind(("127.0.0.1", 0))` comes from its ephemeral range
(ip_local_port_range), the range every other socket bound to port 0 and every outgoing
connection draws from too. Between the moment a test picks such a port and the moment its child
process binds it, another listener can take it (a sidecar's own TCP link binds port 0); the child
then fails to bind, and the test talks to the wrong server. These ports are picked outside that
range (below it, or above), where only explicit binds compete, and none is handed out twice by
one test process.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10000
_given: set[int] = set()
_rng = random.Random()


def _ephemeral() -> tuple[int, int]:
    try:
        low, high = (int(x) for x in _RANGE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
    return low, high


def _spans(offset: int) -> list[range]:
    """Where a port (and port + `offset`) can be picked: below the ephemeral range, or above."""
    low, high = _ephemeral()
    spans = [range(_LOWEST, low - offset), range(high + 1, 65536 - offset)]
    return [s for s in spans if len(s) >= 1000]


def bindable(port: int) -> bool:
    with socket.socket() as s:  # (no SO_REUSEADDR: a port in TIME_WAIT is not free either)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(also_free_at: int = 0) -> int:
    """A free loopback port outside the ephemeral range; with `also_free_at`, port + that offset
    is free and outside it too (a Redis Cluster node listens on port + 10000)."""
    spans = _spans(also_free_at)
    if not spans:  # (a host whose ephemeral range is all of it: the kernel's pick, and its race)
        return _kernel_port(also_free_at)
    for _ in range(1000):
        port = _rng.choice(_rng.choice(spans))
        pair = (port, port + also_free_at) if also_free_at else (port,)
        if any(p in _given or not bindable(p) for p in pair):
            continue
        _given.update(pair)
        return port
    raise RuntimeError("no free loopback port found")


def _kernel_port(also_free_at: int) -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + also_free_at < 65536 and port not in _given:
            _given.add(port)
            return port


def free_ports(n: int) -> list[int]:
    return [free_port() for _ in range(n)]
