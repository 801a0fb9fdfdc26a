"""Which launched sidecars run an engine server that a local drill may kill (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from drill.cluster import engine_port

COMMAND = ["python", "-m", "drill.engine_server", "18086"]


@pytest.mark.parametrize(
    ("launch", "port"),
    [
        ({"backend": "openai", "openai": {"base_url": "http://127.0.0.1:18086",
                                          "model": "m", "command": COMMAND}}, 18086),
        ({"backend": "openai", "openai": {"base_url": "http://localhost", "model": "m",
                                          "command": COMMAND}}, 80),
        ({"backend": "openai", "openai": {"model": "m", "command": COMMAND}}, 8000),
        # The server runs on its own: nothing would start it again.
        ({"backend": "openai", "openai": {"base_url": "http://127.0.0.1:18086", "model": "m"}},
         None),
        # Elsewhere: not a process of this machine.
        ({"backend": "openai", "openai": {"base_url": "http://10.0.0.7:8000", "model": "m",
                                          "command": COMMAND}}, None),
        ({"backend": "sim", "sim": {"model": "m"}}, None),
        ({}, None),
        (None, None),
    ],
)  # fmt: skip
def test_engine_port(launch: dict[str, Any] | None, port: int | None) -> None:
    assert engine_port(launch) == port
