"""The cyclic garbage collector's settings for the gateway process (`gateway.gc`)."""

from __future__ import annotations

import gc

from gateway.config.schema import CollectorSettings

CPYTHON_THRESHOLDS = gc.get_threshold()


def set_thresholds(settings: CollectorSettings) -> None:
    """The configured thresholds, or CPython's (also on a reload)."""
    gc.set_threshold(*(settings.thresholds or CPYTHON_THRESHOLDS))


def after_start(settings: CollectorSettings) -> None:
    """Once the gateway serves (read at start only): collect what start-up left, then freeze
    the survivors (the modules, config, routes and links a full collection would otherwise
    walk every time)."""
    if settings.freeze_after_start:
        gc.collect()
        gc.freeze()


def after_stop(settings: CollectorSettings) -> None:
    """The frozen objects go back to the collector (a process may start another gateway)."""
    if settings.freeze_after_start:
        gc.unfreeze()
