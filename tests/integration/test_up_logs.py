"""One log format for the whole local cluster: `shardgate up` and the sidecars it starts
write the same lines on stderr, JSON (the default) or text (`--log-format text`)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.integration.test_up import shardgate_up
from tests.ports import free_port


@pytest.mark.parametrize("log_format", [None, "json", "text"])
def test_the_gateway_and_its_sidecars_log_one_format(
    log_format: str | None, tmp_path: Path
) -> None:
    """Every line on the cluster's stderr, the gateway's and its sim sidecar's, is one JSON
    object (by default, and with `--log-format json`); with `--log-format text`, none is."""
    http_port, grpc_port, a = (free_port() for _ in range(3))
    config = tmp_path / "gw.yaml"
    config.write_text(
        f"gateway: {{http: {{port: {http_port}}}, grpc: {{port: {grpc_port}}}}}\n"
        "sidecars:\n"
        f"  - {{name: a, address: '127.0.0.1:{a}', "
        "launch: {backend: sim, sim: {model: sim-llama, profile: fast}}}\n"
    )
    flags = [] if log_format is None else ["--log-format", log_format]
    log = tmp_path / "up.log"
    with (
        log.open("wb") as err,
        shardgate_up("--config", str(config), "--log-level", "INFO", *flags, stderr=err) as proc,
    ):
        assert proc.stdout is not None
        assert b"shardgate is up" in proc.stdout.readline()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0  # (its sidecar stopped too: its lines are all there)
    lines = log.read_text().splitlines()
    assert any("engine_sidecar.server" in line and "sidecar a serving on" in line for line in lines)
    if log_format == "text":
        for line in lines:
            with pytest.raises(ValueError):
                json.loads(line)
        return
    loggers = {json.loads(line)["logger"].split(".")[0] for line in lines}
    assert loggers == {"gateway", "engine_sidecar"}
