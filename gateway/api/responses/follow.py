"""A background response's events, from the stream store: replayed after a `sequence_number`
(`starting_after`, -1: from the start), then followed live until the response ends.

The stream log numbers events from 1, the Responses API from 0: event `sequence_number` N is
the log's N + 1. A background response runs whether anyone reads it or not, so its readers take
nothing from each other (none is the stream's reader: several may follow it at once, and none
keeps it alive or lets it go).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from gateway.api.openai.sse import KEEPALIVE, SSE_HEADERS, SSEResponse
from gateway.streams.store import REPLAY_BATCH, StreamLog
from gateway.types import InvalidRequest

__all__ = ["KIND", "events_after", "follow"]

KIND = "responses"  # its logs' kind in the stream store (a chat resume does not find them)

# Closing a follower's response gives up after this long.
CLOSE_TIMEOUT_S = 30.0


def events_after(log: StreamLog, after: int) -> list[bytes]:
    """The kept events after `sequence_number` `after`; a 400 naming `starting_after` when
    some of them are no longer kept (past the stream's bounds, or evicted)."""
    events = log.since(after + 1, REPLAY_BATCH)
    if events is None:
        raise InvalidRequest(
            f"Invalid value for 'starting_after': events up to {log.first - 2} are no longer kept.",
            "starting_after",
        )
    return events


async def follow(
    request: web.Request,
    log: StreamLog,
    after: int,
    headers: dict[str, str],
    keepalive_s: float,
    timeout_s: float,
) -> web.StreamResponse:
    """Replay the events after `after`, then follow the live ones until the stream ends (for
    at most `timeout_s`: the client may come back for the rest)."""
    batch: list[bytes] | None = events_after(log, after)  # (a 400 before anything is sent)
    resp = SSEResponse(headers={**SSE_HEADERS, **headers})
    await resp.prepare(request)
    seen = after + 1  # the log's number of the last event sent
    try:
        async with asyncio.timeout(timeout_s):
            while batch is not None:  # (None: it read too slowly, the rest is no longer kept)
                if batch:
                    await resp.write(b"".join(batch))
                    seen += len(batch)
                    if len(batch) == REPLAY_BATCH:
                        await asyncio.sleep(0)  # (a long replay lets the loop run)
                elif log.finished:
                    break
                else:
                    changed = log.changed()
                    if seen + 1 >= log.next_seq:  # (nothing new since `changed`)
                        done, _ = await asyncio.wait({changed}, timeout=keepalive_s)
                        if not done:
                            await resp.write(KEEPALIVE)
                batch = log.since(seen, REPLAY_BATCH)
    except TimeoutError:
        pass  # its deadline passed: the client may come back for the rest
    async with asyncio.timeout(CLOSE_TIMEOUT_S):
        await resp.write_eof()
    return resp
