"""The fleet's health check is a supervised loop: a round that raises is logged, and the next
round runs (one bad round must not end health checking for good)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.config.schema import LinkSettings
from gateway.runtime.fleet import Fleet


async def test_the_health_check_goes_on_after_a_round_that_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fleet = Fleet([], LinkSettings())
    rounds: list[int] = []
    again = asyncio.Event()

    def flaky() -> None:
        rounds.append(len(rounds))
        if len(rounds) == 1:
            raise RuntimeError("one bad round")
        if len(rounds) >= 3:
            again.set()

    fleet._note_activity = flaky  # type: ignore[method-assign]
    fleet.start()
    try:
        await asyncio.wait_for(again.wait(), 10)
    finally:
        await fleet.close()
    assert "fleet health check failed" in caplog.text
