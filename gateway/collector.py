"""The cyclic garbage collector's settings for the gateway process (`gateway.gc`)."""

from __future__ import annotations

import gc

from gateway.config.schema import CollectorSettings

CPYTHON_THRESHOLDS = gc.get_threshold()


def set_thresholds(settings: CollectorSettings) -> None:
    """The configured thresholds, or CPython's (also on a reload)."""
    gc.set_threshold(*(settings.thresholds or CPYTHON_THRESHOLDS))


def after_start(settings: CollectorSettings) -> None:
    """Once the gateway serves (read at start only): freeze what is alive (the modules, config,
    routes and links a full collection would otherwise walk every time). No collection first:
    in a process that holds more than the gateway (an embedding application, the tests) a full
    one would stall the loop for as long as that heap takes, right when the links start; what
    start-up left behind is small, and goes back to the collector at stop."""
    if settings.freeze_after_start:
        gc.freeze()


def after_stop(settings: CollectorSettings) -> None:
    """The frozen objects go back to the collector (a process may start another gateway)."""
    if settings.freeze_after_start:
        gc.unfreeze()
