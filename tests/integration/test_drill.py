"""`shardgate drill` end to end: a short drill (kill, heartbeat stop, a wedged engine) on a small
local cluster of its own, on free ports, run as a user runs it; and the engine-kill case, with
openai-backend sidecars in front of the drill's own engine servers."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.config.loader import load
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(150)


def write_config(path: Path) -> None:
    sidecar = (
        "    launch: {backend: sim, heartbeat_interval_s: 0.2, allow_fault_injection: true,\n"
        "             sim: {model: sim-llama, profile: llama-70b-a100-tp8, max_num_seqs: 32}}\n"
    )
    path.write_text(
        "gateway:\n"
        f"  http: {{host: 127.0.0.1, port: {free_port()}}}\n"
        f"  grpc: {{host: 127.0.0.1, port: {free_port()}}}\n"
        "  request_log: false\n"
        "  link: {reconnect_min_s: 0.05, reconnect_max_s: 0.5}\n"
        "health:\n"
        "  suspect_after_intervals: 3\n"
        "  down_after_intervals: 6\n"
        "  stall_timeout_s: 0.6\n"
        "  stall_startup_grace_s: 0\n"
        "  ejection: {base_ejection_time_s: 1, max_ejection_time_s: 5}\n"
        "sidecars:\n"
        f"  - name: sim-a\n    address: 127.0.0.1:{free_port()}\n{sidecar}"
        f"  - name: sim-b\n    address: 127.0.0.1:{free_port()}\n{sidecar}"
    )
    load(str(path))  # a valid config


def drill(
    config: Path, out: Path, faults: str = "kill,heartbeat,stall", *extra: str
) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "gateway",
        "drill",
        "--config",
        str(config),
        "--faults",
        faults,
        *extra,
        "--concurrency",
        "8",
        "--requests",
        "8",
        "--tokens",
        "50-70",
        "--warmup",
        "1",
        "--hold",
        "1.5",
        "--settle",
        "0.5",
        "--out",
        str(out),
        "--quiet",
    ]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=140)


def test_a_short_drill_loses_nothing_and_reports(tmp_path: Path) -> None:
    config = tmp_path / "drill.yaml"
    write_config(config)
    out = tmp_path / "out"
    done = drill(config, out)
    assert done.returncode == 0, done.stdout + done.stderr

    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    assert report["ok"] is True
    assert report["mode"] == "local"
    assert report["reference"] == {
        "sent": 8,
        "completed": 8,
        "lost": 0,
        "corrupted": 0,
        "migrated": 0,
        "retried": 0,
    }
    assert [(f["kind"], f["target"]) for f in report["faults"]] == [
        ("kill", "sim-a"),
        ("heartbeat", "sim-b"),
        ("stall", "sim-a"),
    ]
    for f in report["faults"]:
        assert f["sent"] > 0
        assert f["completed"] == f["sent"]
        assert (f["lost"], f["corrupted"]) == (0, 0)
        assert f["recovered"] is True
        assert f["detect_s"] is not None and f["recover_s"] is not None
        assert f["samples"] > 0
        assert set(f["duration_s"]) == {"p50", "p90", "max"}
        states = [s for _, [s], _ in f["timeline"]]
        assert states[0] == 2 and states[-1] == 2  # UP before the fault and after it
        assert any(s != 2 for s in states)
    kill, heartbeat, stall = report["faults"]
    assert kill["takeout_s"] is not None  # the link closed: DOWN
    assert 0 in [s for _, [s], _ in kill["timeline"]]
    # A sidecar that streams without heartbeats is SUSPECT (no new work), not necessarily DOWN.
    assert 1 in [s for _, [s], _ in heartbeat["timeline"]]
    # A wedged engine that still sends heartbeats is taken out (ejected: 3, or DOWN: 0), and its
    # streams migrate.
    assert stall["takeout_s"] is not None
    assert {0, 3} & {s for _, [s], _ in stall["timeline"]}
    assert stall["migrated"] > 0 and stall["ejections"] >= 1
    totals = report["totals"]
    assert totals["migrated"] > 0
    assert (totals["lost"], totals["corrupted"]) == (0, 0)
    assert totals["sent"] == sum(f["sent"] for f in report["faults"])

    table = (out / "table.txt").read_text()
    assert "PASS: 0 lost, 0 corrupted" in table
    assert "PASS: 0 lost, 0 corrupted" in done.stdout
    logs = {p.name for p in (out / "logs").iterdir()}
    assert logs == {"gateway.log", "sim-a.log", "sim-b.log"}


def test_the_drill_refuses_to_start_on_ports_in_use(tmp_path: Path) -> None:
    config = tmp_path / "drill.yaml"
    write_config(config)
    port = load(str(config)).gateway.http.port
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        done = drill(config, tmp_path / "out")
    assert done.returncode == 2
    assert f"127.0.0.1:{port}" in done.stderr and "ports in use" in done.stderr


def write_engine_config(path: Path) -> None:
    """Two openai-backend sidecars, each running its own engine server (30 ms a token), started
    again 2 s after it dies (long enough for every sample of the gateway to see it gone)."""
    sidecars = ""
    for name in ("engine-a", "engine-b"):
        port = free_port()
        command = [sys.executable, "-m", "drill.engine_server", str(port), "0.03"]
        sidecars += (
            f"  - name: {name}\n"
            f"    address: 127.0.0.1:{free_port()}\n"
            "    launch:\n"
            "      backend: openai\n"
            "      heartbeat_interval_s: 0.2\n"
            f"      openai: {{base_url: 'http://127.0.0.1:{port}', model: fake-llm,\n"
            f"               command: {json.dumps(command)},\n"
            "               health_interval_s: 0.2, health_timeout_s: 0.5,\n"
            "               startup_timeout_s: 30, restart_backoff_s: 2.0}\n"
        )
    path.write_text(
        "gateway:\n"
        f"  http: {{host: 127.0.0.1, port: {free_port()}}}\n"
        f"  grpc: {{host: 127.0.0.1, port: {free_port()}}}\n"
        "  request_log: false\n"
        "  link: {reconnect_min_s: 0.05, reconnect_max_s: 0.5}\n"
        "health:\n"
        "  suspect_after_intervals: 3\n"
        "  down_after_intervals: 6\n"
        "  ejection: {base_ejection_time_s: 1, max_ejection_time_s: 5}\n"
        f"sidecars:\n{sidecars}"
    )
    load(str(path))  # a valid config


def test_a_killed_engine_server_is_not_ready_and_its_streams_migrate(tmp_path: Path) -> None:
    config = tmp_path / "drill.yaml"
    write_engine_config(config)
    out = tmp_path / "out"
    done = drill(config, out, "engine-kill", "--model", "fake-llm")
    assert done.returncode == 0, done.stdout + done.stderr

    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    assert report["ok"] is True and report["skipped"] == []
    assert report["reference"]["completed"] == report["reference"]["sent"] == 8
    [f] = report["faults"]
    assert (f["kind"], f["target"]) == ("engine-kill", "engine-a")
    assert f["sent"] > 0 and f["completed"] == f["sent"]
    assert (f["lost"], f["corrupted"]) == (0, 0)  # every text equals the reference run's
    assert f["migrated"] > 0  # the streams in flight on the dead server moved
    assert f["recovered"] is True and f["detect_s"] is not None
    # The model stopped being ready on that replica: one of the two routable, then both again.
    routable = [r for _, _, r in f["timeline"]]
    assert routable[0] == 2 and routable[-1] == 2
    assert 1 in routable
    # Its sidecar saw its server killed once, turned NOT_SERVING, and (recovered) started it again.
    sidecar_log = (out / "logs" / "engine-a.log").read_text()
    assert sidecar_log.count("engine server exited (-9)") == 1
    assert "engine is no longer healthy" in sidecar_log
    assert "engine server exited" not in (out / "logs" / "engine-b.log").read_text()
