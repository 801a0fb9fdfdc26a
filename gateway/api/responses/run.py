"""One response's generation, followed to its end: the job's deltas become the response's
state (status, output, usage) and, when it streams, its events."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway.api.openai.sse import Tally
from gateway.api.responses.encode import Events, ResponseState
from gateway.runtime.job import Job
from gateway.types import GatewayError

__all__ = ["Flush", "drive"]

# Takes the events rendered since the last call (sequence number, bytes) and the keep-alives
# due (the request waits in a queue, or to resume).
Flush = Callable[[list[tuple[int, bytes]], int], Awaitable[None]]


async def drive(
    gen: Job, state: ResponseState, events: Events | None, flush: Flush
) -> GatewayError | None:
    """Follow `gen` to its end; `flush` after each batch. The generation's error ends the
    state as failed (and the stream with response.failed) and is returned; the caller's
    cancellation propagates, leaving the state as it was."""
    tally = Tally()
    opened = False
    error: GatewayError | None = None
    try:
        batch = await gen.take()
        while batch:
            keepalives = 0
            for d in batch:
                tally.add(d)
                if not gen.began or not (d.text or d.token_ids or d.finish or d.prompt_tokens):
                    keepalives += 1
                    continue
                state.status = "in_progress"
                if events is not None and not opened:
                    events.open()
                    opened = True
                if d.text:
                    if events is not None:
                        events.delta(d.text)
                    state.texts.append(d.text)
            await flush(events.take() if events is not None else [], keepalives)
            batch = await gen.take()
        state.finish(tally.finish, tally.usage())
    except GatewayError as e:
        error = e
        state.fail(e, tally.usage())
    if events is not None:
        if error is None:
            if not opened:
                events.open()
            events.close()
        events.end()
        await flush(events.take(), 0)
    return error
