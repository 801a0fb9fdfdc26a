"""Which process listens on a TCP port (Linux /proc), for drills attached to a running cluster."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

_LISTEN = "0A"


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[str]:
    """Socket inodes listening on `port` (IPv4 and IPv6)."""
    inodes: set[str] = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        inodes.update(parse_listeners(lines, port))
    return inodes


def parse_listeners(lines: list[str], port: int) -> set[str]:
    """From /proc/net/tcp lines: the inodes of sockets in LISTEN on `port`."""
    out = set()
    for line in lines:
        fields = line.split()
        if len(fields) < 10 or fields[3] != _LISTEN:
            continue
        _, _, hex_port = fields[1].rpartition(":")
        with contextlib.suppress(ValueError):
            if int(hex_port, 16) == port:
                out.add(fields[9])
    return out


def pid_listening_on(port: int, proc: Path = Path("/proc")) -> int | None:
    """The process (of this user) holding a listening socket on `port`; None if none is found."""
    inodes = {f"socket:[{i}]" for i in listening_inodes(port, proc)}
    if not inodes:
        return None
    me = os.getpid()
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(fd) in inodes:
                    return int(entry.name)
    return None
