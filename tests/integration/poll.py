"""Waiting for a condition with a bounded deadline, instead of sleeping and hoping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def until(cond: Callable[[], object], timeout_s: float = 10.0, what: str = "") -> None:
    """Poll `cond` until it is truthy; fail the test naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout_s} s: {what or 'condition'}")
        time.sleep(0.01)


async def until_async(cond: Callable[[], object], timeout_s: float = 10.0, what: str = "") -> None:
    """`until` inside an event loop: polls between the loop's other work."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout_s} s: {what or 'condition'}")
        await asyncio.sleep(0.01)
