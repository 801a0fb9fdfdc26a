"""`gateway.gc`: the config's collector settings, and what applying them does."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway import collector
from gateway.config.loader import ConfigError, parse
from gateway.config.schema import CollectorSettings


@pytest.fixture
def restored() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)
    gc.unfreeze()


def test_the_section_parses_and_names_a_bad_field() -> None:
    c = parse("gateway:\n  gc: {freeze_after_start: false, thresholds: [50000, 20, 10]}\n")
    assert c.gateway.gc == CollectorSettings(freeze_after_start=False, thresholds=(50000, 20, 10))
    assert parse("gateway: {}\n").gateway.gc.thresholds == (10000, 20, 10)
    assert parse("gateway:\n  gc: {thresholds: null}\n").gateway.gc.thresholds is None
    with pytest.raises(ConfigError, match=r"gateway\.gc\.thresholds"):
        parse("gateway:\n  gc: {thresholds: [0, 10, 10]}\n")


def test_thresholds_are_the_configured_ones_or_cpythons(restored: None) -> None:
    collector.set_thresholds(CollectorSettings(thresholds=(12345, 6, 7)))
    assert gc.get_threshold() == (12345, 6, 7)
    collector.set_thresholds(CollectorSettings(thresholds=None))  # a reload back to null
    assert gc.get_threshold() == collector.CPYTHON_THRESHOLDS != (12345, 6, 7)


def test_what_lives_at_start_is_frozen_until_stop(restored: None) -> None:
    gc.unfreeze()
    off = CollectorSettings(freeze_after_start=False)
    collector.after_start(off)
    assert gc.get_freeze_count() == 0
    collector.after_start(CollectorSettings())
    assert gc.get_freeze_count() > 0
    collector.after_stop(off)
    assert gc.get_freeze_count() > 0
    collector.after_stop(CollectorSettings())
    assert gc.get_freeze_count() == 0


def test_a_sidecar_takes_the_same_collector_settings() -> None:
    from engine_sidecar import config as sidecar_config

    assert sidecar_config.decode({}).gc == CollectorSettings()
    cfg = sidecar_config.decode({"gc": {"thresholds": [5000, 10, 10], "freeze_after_start": False}})
    assert cfg.gc == CollectorSettings(freeze_after_start=False, thresholds=(5000, 10, 10))
