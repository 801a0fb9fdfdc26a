"""One log format for every process: the sidecar's lines are the gateway's (gateway/logs.py),
and `--log-format` on `shardgate up`, `shardgate gateway` and the sidecar, passed on by `up` to
the sidecars and workers it starts."""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine_sidecar import cli as sidecar_cli
from gateway import cli, cluster, logs
from gateway.config.schema import SidecarEndpoint
from gateway.observability import logging as obslog
from gateway.workers import Workers


@pytest.fixture
def root_kept() -> Iterator[None]:
    """The root logger as it was (setup() replaces its own handler only)."""
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield
    for h in [h for h in root.handlers if h not in before]:
        root.removeHandler(h)
    root.setLevel(level)


def test_the_gateway_and_the_sidecar_share_one_formatter_and_setup() -> None:
    assert obslog.JsonFormatter is logs.JsonFormatter
    assert obslog.TextFormatter is logs.TextFormatter
    assert obslog.setup is logs.setup
    assert sidecar_cli.logs is logs


def test_the_sidecar_imports_only_the_gateways_leaf_modules() -> None:
    """The sidecar's layering: gateway.logs as gateway.tasks and gateway.procs, no package
    of the gateway's (gateway.observability would bring its metrics and config)."""
    code = "import json, sys, engine_sidecar.cli; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = [m for m in json.loads(out.stdout) if m.split(".")[0] == "gateway"]
    assert "gateway.logs" in modules
    assert [m for m in modules if m.count(".") > 1 or m == "gateway.observability"] == []


def sidecar_args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    sidecar_cli.add_arguments(p)
    return p.parse_args(["--config-json", "{not json", *argv])


@pytest.mark.parametrize(
    ("argv", "formatter"),
    [((), logs.JsonFormatter), (("--log-format", "json"), logs.JsonFormatter),
     (("--log-format", "text"), logs.TextFormatter)],
)  # fmt: skip
def test_the_sidecar_logs_json_lines_unless_told_text(
    root_kept: None, argv: tuple[str, ...], formatter: type[logging.Formatter]
) -> None:
    assert sidecar_cli.run(sidecar_args(*argv)) == 2  # (its config does not parse: it stops)
    installed = logs.handler()
    assert installed is not None and installed in logging.getLogger().handlers
    assert type(installed.formatter) is formatter


def test_the_sidecar_takes_no_other_format(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        sidecar_args("--log-format", "xml")
    assert "invalid choice: 'xml'" in capsys.readouterr().err


def test_up_passes_the_format_to_its_sidecars_and_workers() -> None:
    sim = {"backend": "sim", "sim": {"model": "sim-llama"}}
    e = SidecarEndpoint(name="a", address="127.0.0.1:50061", launch=sim)
    argv = cluster.sidecar_argv(e, "INFO", "text")
    assert argv[argv.index("--log-format") + 1] == "text"
    default = cluster.sidecar_argv(e, "INFO")
    assert default[default.index("--log-format") + 1] == "json"
    sidecar_cli.add_arguments(p := argparse.ArgumentParser())
    assert p.parse_args(argv[3:]).log_format == "text"  # (what the sidecar reads of it)
    workers = Workers(2, "gw.yaml", None, None, "ERROR", log_format="text")._args
    assert workers[workers.index("--log-format") + 1] == "text"


@pytest.mark.parametrize(
    ("command", "flag", "json_logs", "want"),
    [
        ("up", None, True, "json"),
        ("up", "text", True, "text"),
        ("up", None, False, "text"),
        ("up", "json", False, "json"),
        ("gateway", None, True, "json"),
        ("gateway", "text", True, "text"),
    ],
)
def test_shardgate_takes_log_format_over_the_configs_json_logs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    flag: str | None,
    json_logs: bool,
    want: str,
) -> None:
    config = tmp_path / "gw.yaml"
    gateway = {"http": {"port": 0}, "grpc": {"port": 0}, "json_logs": json_logs}
    config.write_text(json.dumps({"gateway": gateway}))
    logged: list[bool] = []
    started: list[tuple[Any, ...]] = []
    monkeypatch.setattr(cli, "_logging", lambda level, json: logged.append(json))
    monkeypatch.setattr(cluster, "up", lambda *a: started.append(a))

    def run(coro: Any) -> int:
        if hasattr(coro, "close"):
            coro.close()  # (the gateway itself is not started)
        return 0

    monkeypatch.setattr(cli, "_run", run)
    argv = [command, "--config", str(config)] + ([] if flag is None else ["--log-format", flag])
    assert cli.main(argv) == 0
    assert logged == [want == "json"]
    if command == "up":
        [args] = started
        assert args[-1] == want  # (to every sidecar and worker it starts)
