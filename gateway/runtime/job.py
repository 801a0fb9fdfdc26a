"""One client request across its attempts: queued, running on a replica, preempted, done.

The link reader calls `push`/`fail` on the job that owns a link key; the job records the token
ids generated so far (what a resume continues from) and forwards output to the client's stream.
Failures go to the job's owner, which retries, migrates or ends the request.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from gateway.runtime.stream import ResponseStream
from gateway.types import Delta, Finish, GatewayError, GatewayTimeout, GenerationRequest

if TYPE_CHECKING:
    from gateway.policy.admission import Admitted
    from gateway.policy.priority_queue import Waiter
    from gateway.policy.retry import Attempts
    from gateway.policy.routing.snapshot import RequestFeatures
    from gateway.upstream.link import EngineLink


class State(enum.IntEnum):
    QUEUED = 0
    RUNNING = 1
    PREEMPTED = 2
    DONE = 3


class Owner(Protocol):
    def finished(self, job: Job) -> None: ...

    def failed(self, job: Job, error: GatewayError) -> None: ...


class Job:
    __slots__ = (
        "_began",
        "_deadline",
        "_task",
        "_timer",
        "arrival",
        "attempts",
        "cached_tokens",
        "features",
        "finish",
        "first_replica",
        "first_token_at",
        "generated",
        "key",
        "last_token_at",
        "link",
        "migrations",
        "observe_itl",
        "out",
        "outcome",
        "owner",
        "preemptions",
        "priority",
        "prompt_tokens",
        "replica",
        "request",
        "retries",
        "started_at",
        "state",
        "tenant",
        "ticket",
        "timed_out",
        "waiter",
    )

    def __init__(
        self,
        request: GenerationRequest,
        owner: Owner,
        out: ResponseStream,
        *,
        tenant: str = "anonymous",
        priority: int = 0,
        arrival: float = 0.0,
    ) -> None:
        self.request = request
        self.owner = owner
        self.out = out
        self.tenant = tenant
        self.priority = priority
        self.arrival = arrival
        self.generated: list[int] = []
        self.prompt_tokens = 0
        self.state = State.QUEUED
        self.link: EngineLink | None = None
        self.key = 0
        self.first_replica = ""  # the address of the replica that first took it
        self.replica = ""  # the name of the replica running it now
        self.features: RequestFeatures | None = None  # for routing, computed once
        self.attempts: Attempts | None = None
        self.retries = 0
        self.migrations = 0
        self.preemptions = 0
        self.started_at = 0.0
        self.first_token_at = 0.0
        self.last_token_at = 0.0
        self.cached_tokens = 0
        self.finish = Finish.NONE
        # How it ended (an Outcome value of the metrics), set by whoever ends it.
        self.outcome = ""
        self.timed_out = False
        self.observe_itl: Callable[[float], None] | None = None
        self.ticket: Admitted | None = None  # the admission ticket, settled when done
        self.waiter: Waiter[Job] | None = None  # its place in the pool's queue
        self._began = False  # the client side took its first output
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[object] | None = None  # the client side's, once armed

    # -- from the link reader ------------------------------------------------------------
    @property
    def headers(self) -> tuple[tuple[str, str], ...]:
        """Rate-limit headers for the response."""
        return self.ticket.headers if self.ticket is not None else ()

    def push(self, d: Delta) -> None:
        if d.token_ids:
            self.generated.extend(d.token_ids)
            now = _clock()
            if self.last_token_at:
                if self.observe_itl is not None:
                    self.observe_itl(now - self.last_token_at)
            else:
                self.first_token_at = now
            self.last_token_at = now
        if d.prompt_tokens:
            self.prompt_tokens = d.prompt_tokens
            self.cached_tokens = d.cached_tokens
        if d.finish:  # (not `is not Finish.NONE`: enum attribute access is slow in 3.11)
            self.link = None
            self.state = State.DONE
            self.finish = d.finish
            self.outcome = "ok" if d.finish is Finish.STOP else "length"
            self.out.push(d)
            self.owner.finished(self)
            return
        self.out.push(d)

    def fail(self, error: GatewayError) -> None:
        self.link = None
        if self.state is not State.DONE:
            self.owner.failed(self, error)

    # -- for the API edges ---------------------------------------------------------------
    async def take(self) -> list[Delta]:
        return await self.out.take()

    def arm(self, deadline: float, first_output_s: float) -> None:
        """Start the request's clock (loop time), one timer for both limits: no output at all
        within `first_output_s`, or not finished by `deadline`, fails the client's stream with a
        504 and aborts the engine request at once."""
        loop = asyncio.get_running_loop()
        self._deadline = deadline
        self._task = asyncio.current_task()
        self._timer = loop.call_at(min(deadline, loop.time() + first_output_s), self._expire)

    def _expire(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        done = self.state is State.DONE
        if not self._began and not self.out.pending and not done:
            error = GatewayTimeout("Timed out waiting for the engine to start.")
        elif loop.time() < self._deadline:
            self._timer = loop.call_at(self._deadline, self._expire)
            return
        elif done:
            # The engine side is over; a client side still here past the deadline is stuck in
            # a write to a client that stopped reading.
            if not self.out.waiting:
                self._cut()
            return
        else:
            error = GatewayTimeout("The request ran past its deadline.")
        self.timed_out = True
        waiting = self.out.waiting
        self.out.fail(error)  # the client side learns it (504, error event, gRPC status)
        self.owner.failed(self, ClientGone(True))  # and the engine stops, whatever it does
        if not waiting:
            self._cut()  # stuck elsewhere, in a write to a client that stopped reading
        else:
            self._timer = loop.call_later(CUT_AFTER_S, self._cut)

    def _cut(self) -> None:
        """Ends the client side's task: nothing more can be told to that client."""
        self._timer = None
        if self._task is not None:
            self._task.cancel()

    async def first_batch(self) -> list[Delta]:
        """The first output: tokens, an error, or a keep-alive while queued."""
        batch = await self.out.take()
        self._began = True
        return batch

    def close(self, timed_out: bool = False) -> None:
        """The client is done with the request (finished, failed, gone or out of time)."""
        self._task = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.state is not State.DONE:
            self.owner.failed(self, ClientGone(timed_out or self.timed_out))


_clock = time.monotonic
# After its deadline, a request's client side gets this long to write the error and close.
CUT_AFTER_S = 5.0


class ClientGone(GatewayError):
    """The client side stopped waiting: it disconnected, or the request's deadline passed."""

    status = 499
    type = "client_closed_request"

    def __init__(self, timed_out: bool = False) -> None:
        super().__init__("The request timed out." if timed_out else "The client went away.")
        self.timed_out = timed_out
