"""The per-request collector between a link reader and the client's writer.

The link reader pushes deltas without awaiting; the client side takes everything pending in one
go. A client that lags past `max_pending` deltas gets them merged into one, so memory stays
bounded and the link never waits for a client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from shardgate.v1 import parsed

from gateway.types import Delta, GatewayError


def merge(deltas: list[Delta]) -> Delta:
    out = Delta(token_ids=[], text="")
    texts = []
    answers: list[parsed.Parsed] = []
    for d in deltas:
        out.token_ids.extend(d.token_ids)
        texts.append(d.text)
        if d.logprobs:
            if out.logprobs is None:
                out.logprobs = []
            out.logprobs.extend(d.logprobs)
        if d.parsed:
            answers.append(parsed.decode(d.parsed))
        if d.prompt_tokens:
            out.prompt_tokens = d.prompt_tokens
            out.cached_tokens = d.cached_tokens
        if d.prompt_logprobs:
            out.prompt_logprobs = d.prompt_logprobs
        if d.finish:
            out.finish = d.finish
            out.completion_tokens = d.completion_tokens
            out.stop_sequence = d.stop_sequence
    out.text = "".join(texts)
    if answers:
        out.parsed = parsed.encode(parsed.merge(answers))
    return out


class ResponseStream:
    __slots__ = ("_waiter", "done", "error", "max_pending", "pending", "sink")

    def __init__(self, max_pending: int) -> None:
        self.pending: list[Delta] = []
        # Takes a delta straight to the client when it can (True), or leaves it to `take`.
        self.sink: Callable[[Delta], bool] | None = None
        self.max_pending = max_pending
        self.done = False
        self.error: GatewayError | None = None
        self._waiter: asyncio.Future[None] | None = None

    def push(self, delta: Delta) -> None:
        pending = self.pending
        sink = self.sink
        if sink is not None and not pending and sink(delta):
            return
        pending.append(delta)
        if delta.finish:
            self.done = True
        elif len(pending) > self.max_pending:
            self.pending = [merge(pending)]
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    @property
    def waiting(self) -> bool:
        """The client side is waiting in `take`."""
        return self._waiter is not None

    def fail(self, error: GatewayError) -> None:
        if self.done:
            return
        self.done = True
        self.error = error
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def take(self) -> list[Delta]:
        """Everything pending (waiting if nothing is); raises the stream's error when failed.

        Returns an empty list once the stream is done and drained.
        """
        if not self.pending:
            if self.error is not None:
                raise self.error
            if self.done:
                return []
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
            if not self.pending and self.error is not None:
                raise self.error
        out, self.pending = self.pending, []
        return out
