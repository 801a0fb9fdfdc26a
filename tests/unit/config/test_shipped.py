"""Every config under configs/ (its sidecars' `launch` sections included) and every bench
scenario under bench/scenarios/ parses: what the README's commands and bench/RESULTS.md point
at cannot rot unnoticed."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import scenario
from gateway.cluster import check_launch
from gateway.config.loader import load

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
SCENARIOS = sorted((ROOT / "bench" / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_each_config_parses(path: Path) -> None:
    check_launch(load(path))  # (each `launch` section by the sidecar's own schema: a sim
    # profile that does not exist fails here)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_each_scenario_parses_under_its_file_name(path: Path) -> None:
    assert scenario.parse(path.read_text(), str(path)).name.lower() == path.stem


def test_there_are_some() -> None:
    assert len(CONFIGS) > 5 and len(SCENARIOS) > 5
