"""The cyclic garbage collector's settings for the gateway process (`gateway.gc`) and for a
sidecar's (its `gc`)."""

from __future__ import annotations

import gc
from typing import Annotated

import msgspec

CPYTHON_THRESHOLDS = gc.get_threshold()
PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]


class CollectorSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The cyclic garbage collector of a gateway or sidecar process (its pauses stop the event
    loop; the gateway's `shardgate_gc_pause_seconds` times them)."""

    # Once started, move every object alive (modules, config, routes, links) out of the
    # collector's sight (`gc.freeze()`, undone at stop): a full collection then walks ~140,000
    # objects fewer. With CPython's thresholds it did not pay (full ones come more often), with
    # the default thresholds it did (bench/RESULTS.md).
    freeze_after_start: bool = True
    # `gc.set_threshold(gen0, gen1, gen2)`; null: CPython's own (700, 10, 10). The default
    # takes the full collections (100-250 ms each under 2,000 streams) off the hot path and
    # the collector from ~30% of the gateway's CPU to ~10% there (bench/RESULTS.md).
    thresholds: tuple[PositiveInt, NonNegativeInt, NonNegativeInt] | None = (10000, 20, 10)


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
