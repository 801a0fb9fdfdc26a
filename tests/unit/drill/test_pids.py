"""Finding a listening socket's inode in /proc/net/tcp lines."""

from __future__ import annotations

from pathlib import Path

from drill.pids import parse_listeners, pid_listening_on

HEAD = "sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode"
_REST = "00000000:00000000 00:00000000 00000000 0 0"
LINES = [
    f"0: 0100007F:C5A1 00000000:0000 0A {_REST} 1111 1",
    f"1: 0100007F:C5A1 0100007F:9C40 01 {_REST} 2222 1",
    f"2: 0100007F:C5A2 00000000:0000 0A {_REST} 3333 1",
    "3: short line",
]


def test_only_listening_sockets_on_the_port() -> None:
    assert parse_listeners(LINES, 0xC5A1) == {"1111"}
    assert parse_listeners(LINES, 0xC5A2) == {"3333"}
    assert parse_listeners(LINES, 1) == set()


def test_no_listener_means_no_pid(tmp_path: Path) -> None:
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text("\n".join([HEAD, *LINES]) + "\n")
    assert pid_listening_on(1, tmp_path) is None
