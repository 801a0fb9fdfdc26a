"""`--port-offset`: what moves (a local cluster's fixed ports) and what stays."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config.loader import parse
from gateway.config.offset import moved
from gateway.config.reload import Reloader
from gateway.config.schema import Config

TEXT = """
gateway: {http: {port: 8080}, grpc: {port: 0}}
sidecars:
  - {name: a, address: '127.0.0.1:50061', launch: {link_port: 50071, metrics_port: 50081}}
  - {name: b, address: '127.0.0.1:50062', launch: {link_port: -1}}
  - {name: c, address: 'engine.example:50063'}
"""


def test_the_fixed_ports_of_what_it_launches_move_and_the_rest_stays() -> None:
    c = moved(parse(TEXT), 100)
    assert (c.gateway.http.port, c.gateway.grpc.port) == (8180, 0)  # 0: a free port, still
    assert [e.address for e in c.sidecars] == [
        "127.0.0.1:50161",
        "127.0.0.1:50162",
        "engine.example:50063",  # not launched: runs elsewhere
    ]
    assert c.sidecars[0].launch == {"link_port": 50171, "metrics_port": 50181}
    assert c.sidecars[1].launch == {"link_port": -1}  # off
    assert moved(parse(TEXT), 0) == parse(TEXT)


def test_an_offset_past_the_last_port_names_the_setting() -> None:
    with pytest.raises(ValueError, match=r"gateway\.http\.port from 8080 to 65580"):
        moved(parse(TEXT), 57500)


def test_a_reload_moves_the_files_ports_by_the_same_offset(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(TEXT)
    applied: list[Config] = []
    reloader = Reloader(path, TEXT, lambda c, v, d: applied.append(c), port_offset=100)
    path.write_text(TEXT + "models: [sim-llama]\n")
    assert reloader.reload("SIGHUP")
    assert [e.address for e in applied[0].sidecars] == [
        "127.0.0.1:50161",
        "127.0.0.1:50162",
        "engine.example:50063",
    ]
