"""vLLM's log lines in the sidecar's format: a logging config file its processes inherit,
unless the operator said how vLLM logs."""

from __future__ import annotations

import json
import logging
import logging.config
import os
from pathlib import Path

import pytest

from engine_sidecar.backends.vllm.logs import CONFIG_PATH, CONFIGURE, route_vllm_logs


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in (CONFIG_PATH, CONFIGURE):
        monkeypatch.setenv(name, "")  # (so that what the test sets is undone after it)
        monkeypatch.delenv(name)
    return monkeypatch


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_vllm_lines_go_to_stderr_in_the_sidecar_format(
    clean_env: pytest.MonkeyPatch, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = route_vllm_logs(fmt == "json", "info")
    assert path is not None and os.environ[CONFIG_PATH] == path
    config = json.loads(Path(path).read_text())
    logger = logging.getLogger("vllm.v1.engine.core")
    saved = logging.getLogger("vllm").handlers[:]
    try:
        logging.config.dictConfig(config)  # (as vLLM applies it, in each of its processes)
        logger.info("engine %s", "up")
        logger.debug("not at info")
    finally:
        logging.getLogger("vllm").handlers[:] = saved
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1
    if fmt == "json":
        record = json.loads(lines[0])
        assert (record["logger"], record["msg"], record["level"]) == (
            logger.name,
            "engine up",
            "info",
        )
    else:
        assert "engine up" in lines[0] and not lines[0].startswith("{")


@pytest.mark.parametrize(("name", "value"), [(CONFIG_PATH, "/etc/mine.json"), (CONFIGURE, "1")])
def test_an_operator_setting_wins(clean_env: pytest.MonkeyPatch, name: str, value: str) -> None:
    clean_env.setenv(name, value)
    assert route_vllm_logs(True, "INFO") is None
    assert os.environ.get(CONFIG_PATH) == (value if name == CONFIG_PATH else None)
