"""One response's generation, followed to its end: the job's deltas become the response's
state (status, output, usage) and, when it streams, its events."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from shardgate.v1 import parsed

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
    whole = gen.request.generation.parse_whole  # (not streamed: no events)
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
                text = d.text
                if d.parsed and whole:  # the whole answer, parsed: instead of the raw text
                    state.whole(parsed.decode(d.parsed))
                    continue
                if d.parsed:  # what this step added to the parsed answer
                    p = parsed.decode(d.parsed)
                    text = p.content or ""
                    for c in p.tool_calls:
                        state.add_call(c)
                if text:
                    if events is not None:
                        if not events.message:
                            events.open()
                        events.delta(text)
                    state.texts.append(text)
            await flush(events.take() if events is not None else [], keepalives)
            batch = await gen.take()
        state.finish(tally.finish, tally.usage())
    except GatewayError as e:
        error = e
        state.fail(e, tally.usage())
    if events is not None:
        if error is None:
            if not events.message and not state.calls:
                events.open()  # (an empty answer: one empty message)
            if events.message:
                events.close()
            events.calls()
        events.end()
        await flush(events.take(), 0)
    return error
