"""One client request across its attempts: queued, placed on a replica, streaming, preempted,
migrating, done or failed (gateway/runtime/lifecycle.py).

The link reader calls `push`/`fail` on the job that owns a link key: `push` records the token
ids generated so far (what a resume continues from) and forwards output to the client's stream
at once (the token path); the end of an attempt (finished, failed) and of the client side (gone,
out of time) are events for the scheduler, which owns every other change of the request.
"""

from __future__ import annotations

import asyncio
import math
import time
from array import array
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING

from shardgate.v1.params import not_resumable, tools_not_resumable

from gateway.policy import unknown_fields
from gateway.runtime.deadlines import Deadlines
from gateway.runtime.events import EventQueue, Failed, Finished, Left
from gateway.runtime.lifecycle import TABLE, Move, State, stale
from gateway.runtime.stream import ResponseStream
from gateway.types import Delta, Finish, GatewayError, GatewayTimeout, GenerationRequest

if TYPE_CHECKING:
    from gateway.policy.grants import Charge
    from gateway.policy.priority_queue import Waiter
    from gateway.policy.retry import Attempts
    from gateway.policy.routing.snapshot import RequestFeatures
    from gateway.runtime.admitter import Ticket
    from gateway.runtime.forecast import Forecast
    from gateway.upstream.link import EngineLink

# Module globals: an enum attribute lookup per token is slow in CPython 3.11.
_PLACED = State.PLACED
_STREAMING = State.STREAMING
_DONE = State.DONE
_FINISH = Move.FINISH


class Job:
    __slots__ = (
        "_began",
        "_deadline",
        "_deadlines",
        "_due",
        "_first_by",
        "_first_output_s",
        "_task",
        "_tick",
        "_timer",
        "arrival",
        "attempt",
        "attempts",
        "beat_at",
        "cached_tokens",
        "charge",
        "events",
        "features",
        "finish",
        "first_replica",
        "first_token_at",
        "forecast",
        "generated",
        "key",
        "last_token_at",
        "link",
        "migrations",
        "objective",
        "observe_itl",
        "out",
        "outcome",
        "pinned",
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
        events: EventQueue,
        out: ResponseStream,
        *,
        tenant: str = "anonymous",
        priority: int = 0,
        arrival: float = 0.0,
        deadlines: Deadlines | None = None,
    ) -> None:
        """`deadlines`: the wheel its deadline goes on (the scheduler's; one of its own if
        none)."""
        self.request = request
        self.events = events
        self.out = out
        self.tenant = tenant
        self.priority = priority
        self.arrival = arrival
        # (int32s, as engine.proto's: 4 bytes a token, against a list's pointer and an int
        # object for nearly every id of a real vocabulary)
        self.generated: array[int] = array("i")
        # What keeps it from resuming exactly elsewhere (empty: it can resume).
        self.pinned = not_resumable(request.sampling) + tools_not_resumable(
            request.generation.tools
        )
        self.prompt_tokens = 0
        self.state = State.QUEUED
        self.attempt = 0  # placements so far: an event of an earlier attempt is stale
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
        self.beat_at = math.inf  # the scheduler's clock: its next keep-alive while queued
        self.cached_tokens = 0
        self.finish = Finish.NONE
        # How it ended (an Outcome value of the metrics), set by whoever ends it.
        self.outcome = ""
        self.timed_out = False
        self.observe_itl: Callable[[float], None] | None = None
        self.ticket: Ticket | None = None  # the admission ticket, settled when done
        self.charge: Charge | None = None  # what it reserved of a store key's budget
        self.waiter: Waiter[Job] | None = None  # its place in the pool's queue
        self.objective = request.objective  # its latency targets (the service resolves them)
        self.forecast: Forecast | None = None  # what its current placement was predicted
        self._began = False  # an engine produced its first output
        self._deadline = math.inf  # loop time
        self._first_by = math.inf  # loop time by which the engine it was placed on must answer
        self._first_output_s = math.inf
        self._deadlines = deadlines if deadlines is not None else Deadlines()
        self._due = math.inf  # its entry's time on the wheel (inf: none)
        self._tick = 0  # (and the entry's tick)
        self._timer: asyncio.TimerHandle | None = None  # the cut, once past the deadline
        self._task: asyncio.Task[object] | None = None  # the client side's, once armed

    @property
    def headers(self) -> tuple[tuple[str, str], ...]:
        """Rate-limit headers for the response, and the body's fields its API ignored."""
        out = self.ticket.headers if self.ticket is not None else ()
        unknown = self.request.unknown_fields
        if unknown is None:
            return out
        return (*out, (unknown_fields.HEADER, unknown_fields.header_value(unknown)))

    @property
    def preemptible(self) -> bool:
        """On an engine now (not finishing) and able to resume: a higher class may take its
        slot."""
        return (self.state is _PLACED or self.state is _STREAMING) and not self.pinned

    # -- from the link reader (the token path: no await, no other request touched) ---------
    def push(self, d: Delta) -> None:
        state = self.state
        if state is not _STREAMING:
            if state is not _PLACED:
                return  # not on an engine (a delta that raced the end of its attempt)
            self.state = _STREAMING  # its attempt's first output (lifecycle: TOKEN)
            self._began = True
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
            self.state = TABLE[(_STREAMING, _FINISH)]
            self.finish = d.finish
            self.outcome = "ok" if d.finish is Finish.STOP else "length"
            self.out.push(d)  # (first: its client's answer is written before the settling)
            self.events.post(Finished(self))
            return
        self.out.push(d)

    def fail(self, error: GatewayError) -> None:
        """Its current attempt failed (the engine's error, or the link went down)."""
        self.link = None
        if stale(self.state):
            self.out.fail(error)  # its handling broke after its end: the client hears it
            return
        self.events.post(Failed(self, self.attempt, error))

    # -- from the scheduler --------------------------------------------------------------
    def placed(self) -> None:
        """It reached an engine: the first-output limit counts from now (again after a move
        that came before any output)."""
        self.attempt += 1
        if self._began or self._first_output_s == math.inf:
            return
        self._first_by = asyncio.get_running_loop().time() + self._first_output_s
        self._rearm()

    def left_engine(self) -> None:
        """It is off its engine (preempted, or its replica failed it): no first-output limit
        runs until it is placed again (its entry, if earlier, re-arms for the deadline)."""
        self._first_by = math.inf

    # -- for the API edges ---------------------------------------------------------------
    def take(self) -> Coroutine[None, None, list[Delta]]:
        """Its stream's `take` (no frame of its own while a client side waits on it)."""
        return self.out.take()

    def arm(self, deadline: float, first_output_s: float, *, cuts: bool = True) -> None:
        """Start the request's clock (loop time), one deadline for both limits: no output within
        `first_output_s` of reaching an engine, or not finished by `deadline`, fails the
        client's stream with a 504 and aborts the engine request at once. `cuts`: past the
        deadline, a client side stuck in a write is cancelled (its task: the caller's); False
        where the caller cuts it itself (one client side for several jobs: n > 1)."""
        loop = asyncio.get_running_loop()
        self._deadline = deadline
        self._first_output_s = first_output_s
        self._task = asyncio.current_task() if cuts else None
        if self.attempt and not self._began:  # placed on admission, before the clock started
            self._first_by = loop.time() + first_output_s
        self._rearm()

    def _rearm(self) -> None:
        # (the first-output limit holds until its first output, and not once it has ended)
        past_first = self._began or stale(self.state)
        when = self._deadline if past_first else min(self._deadline, self._first_by)
        if when == math.inf:
            return
        if self._due != math.inf:
            if self._due <= when:
                return  # (it expires first, and comes back here)
            self._deadlines.remove(self, self._tick)
        self._due = when
        self._tick = self._deadlines.add(self, when)

    def expire(self) -> None:
        """Its entry on the wheel has come: the limit it was for, or the next one."""
        self._due = math.inf
        loop = asyncio.get_running_loop()
        now = loop.time()
        done = self.state is _DONE
        if not done and not self._began and now >= self._first_by:
            error = GatewayTimeout(
                "Timed out waiting for the engine to start (gateway.first_token_timeout_s)."
            )
        elif now < self._deadline:
            self._rearm()
            return
        elif done:
            # The engine side is over; a client side still here past the deadline is stuck in
            # a write to a client that stopped reading.
            if not self.out.waiting:
                self._cut()
            return
        else:
            error = GatewayTimeout("The request ran past its deadline (gateway.request_timeout_s).")
        self.timed_out = True
        waiting = self.out.waiting
        self.out.fail(error)  # the client side learns it (504, error event, gRPC status)
        if not stale(self.state):
            self.events.post(Left(self, True))  # and the engine stops, whatever it does
        if not waiting:
            self._cut()  # stuck elsewhere, in a write to a client that stopped reading
        else:
            self._timer = loop.call_later(CUT_AFTER_S, self._cut)

    def _cut(self) -> None:
        """Ends the client side's task: nothing more can be told to that client."""
        self._timer = None
        if self._task is not None:
            self._task.cancel()

    def handover(self) -> None:
        """Its client side moves to the current task (a stream kept going after its client
        left): past the deadline, that task is cut from now on."""
        self._task = asyncio.current_task()

    @property
    def began(self) -> bool:
        """An engine produced output for it (a keep-alive while queued is not output)."""
        return self._began

    def close(self, timed_out: bool = False) -> None:
        """The client is done with the request (finished, failed, gone or out of time)."""
        self._task = None
        if self._due != math.inf:
            self._deadlines.remove(self, self._tick)
            self._due = math.inf
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not stale(self.state) and not self.timed_out:  # (its expiry told the scheduler)
            self.events.post(Left(self, timed_out))


_clock = time.monotonic
# After its deadline, a request's client side gets this long to write the error and close.
CUT_AFTER_S = 5.0
