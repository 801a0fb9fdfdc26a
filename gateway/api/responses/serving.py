"""The Responses API: POST /v1/responses, GET /v1/responses/{id} (`?stream=true&starting_after=N`)
and POST /v1/responses/{id}/cancel.

A request goes through the same service entry point as chat completions (admission,
priorities, routing, preemption, migration). A stored response (`store`, the default) is kept
for its tenant (gateway.responses.retention_s); a background one runs in a task of its own,
bounded by the request deadline like any other, its events kept in the gateway's stream store
(gateway/streams/: its bounds, retention and eviction, as for every API's streams) so that a
client can follow it, drop and come back with `starting_after`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from aiohttp import web

from gateway.api.body import read_body
from gateway.api.openai.sse import KEEPALIVE, SSE_HEADERS, SSEResponse, parse_priority
from gateway.api.openai.sse import response_headers as job_headers
from gateway.api.responses.encode import Events, ResponseState, encode_response
from gateway.api.responses.follow import KIND, follow
from gateway.api.responses.protocol import Decoded, decode_responses, generation_request
from gateway.api.responses.run import drive
from gateway.api.responses.store import ResponseStore, Stored
from gateway.config.schema import GatewaySettings
from gateway.ids import new_request_id
from gateway.policy import objectives
from gateway.policy.objectives import TPOT_HEADER, TTFT_HEADER
from gateway.policy.tenants import bearer_key
from gateway.policy.unknown_fields import admit
from gateway.runtime.job import Job
from gateway.runtime.service import Service
from gateway.streams.hub import Streams
from gateway.streams.owner import RESPONSE
from gateway.streams.store import StreamLog
from gateway.tasks import stop, stop_all
from gateway.types import GatewayError, InvalidRequest, Message, ModelNotFound, Unavailable

__all__ = ["Entry", "ResponsesServing"]

logger = logging.getLogger(__name__)

_JSON: Final = "application/json"


class Entry:
    """A stored response: its state, its conversation (for a later previous_response_id),
    and the task that runs it in the background."""

    __slots__ = ("conversation", "state", "task")

    def __init__(self, state: ResponseState, conversation: tuple[Message, ...]) -> None:
        self.state = state
        self.conversation = conversation
        self.task: asyncio.Task[None] | None = None

    def size(self) -> int:
        """Its bytes, about."""
        text = sum(len(m.content) for m in self.conversation) + len(self.state.output_text)
        return 2048 + 4 * text


def not_found(id: str) -> ModelNotFound:
    return ModelNotFound(f"Response with id '{id}' not found.", "response_id")


class ResponsesServing:
    def __init__(
        self, service: Service, settings: GatewaySettings, streams: Streams | None = None
    ) -> None:
        """`streams`: the gateway's stream store, which keeps background responses' events
        (without one, a store of its own)."""
        self._service = service
        self.settings = settings
        self.store: ResponseStore[Entry] = ResponseStore(settings.responses)
        self.streams = streams if streams is not None else Streams(settings)
        self._tasks: set[asyncio.Task[None]] = set()

    def reconfigure(self, settings: GatewaySettings) -> None:
        """A reload: new limits and bounds (kept responses stay; the bounds apply as they
        change)."""
        self.settings = settings
        self.store.settings = settings.responses

    async def close(self) -> None:
        """Stop the background responses still running (their engine requests abort)."""
        await stop_all(self._tasks)

    def _tenant(self, request: web.Request) -> str:
        return self._service.tenants.resolve(bearer_key(request.headers.get("Authorization"))).name

    # -- POST /v1/responses -----------------------------------------------------------------
    async def create(self, request: web.Request, rid: str) -> web.StreamResponse:
        s = self.settings
        body = await read_body(request, s.max_body_bytes, s.client_body_timeout_s)
        decoded = decode_responses(body, s.default_max_tokens)
        tenant = self._tenant(request)
        if decoded.unknown is not None:  # (refused, or named in a warning: before any work)
            key = bearer_key(request.headers.get("Authorization"))
            admit(decoded.unknown, rid, self._service.tenants.resolve(key), s.unknown_fields)
        prior = self._prior(decoded, tenant)
        req = generation_request(decoded, rid, prior)
        asked = request.headers.get("x-priority")
        if asked is not None:
            req.priority = parse_priority(asked)
        req.session_id = request.headers.get("x-session-id", "")[:128]
        req.objective = objectives.parse(
            request.headers.get(TTFT_HEADER), request.headers.get(TPOT_HEADER)
        )
        gen = await self._service.submit(req, bearer_key(request.headers.get("Authorization")))
        state = _state_of(decoded, req.served_model, self.streams.tag)
        entry = Entry(state, prior + decoded.messages)
        if decoded.background:
            return await self._background(request, gen, entry, tenant, decoded.stream)
        stored = None
        if decoded.store:
            reserve = 2048 + 4 * (decoded.sampling.max_tokens + len(body))
            stored = Stored(state.id, tenant, entry, None, reserve)
            if not self.store.add(stored):
                stored = None  # answered, not kept: the store is full of running ones
        try:
            unkept = decoded.store and stored is None
            return await self._foreground(request, gen, state, decoded.stream, unkept)
        finally:
            gen.close()
            state.cancel()  # (the client left before its end)
            if stored is not None:
                self._finish(stored)

    async def _foreground(
        self, request: web.Request, gen: Job, state: ResponseState, stream: bool, unkept: bool
    ) -> web.StreamResponse:
        """Answered to the client that asked, whole or streamed (`unkept`: it asked for
        `store` and the store is full)."""
        s = self.settings
        deadline = asyncio.get_running_loop().time() + s.request_timeout_s
        gen.arm(deadline, s.first_token_timeout_s)
        headers = job_headers(gen)
        if unkept:
            headers["x-shardgate-stored"] = "false"
        if stream:
            return await self._stream(request, gen, state, headers)
        error = await drive(gen, state, None, _no_flush)
        if error is not None:
            raise error
        return web.Response(body=encode_response(state), content_type=_JSON, headers=headers)

    def _prior(self, decoded: Decoded, tenant: str) -> tuple[Message, ...]:
        """The conversation of the previous response named (its input, then its output)."""
        prev_id = decoded.body.previous_response_id
        if prev_id is None:
            return ()
        found = self.store.get(prev_id, tenant)
        if found is None:
            err = not_found(prev_id)
            err.param = "previous_response_id"
            raise err
        prev = found.value
        if prev.state.status not in ("completed", "incomplete"):
            raise InvalidRequest(
                f"Invalid value for 'previous_response_id': response '{prev_id}' is "
                f"{prev.state.status}, not completed.",
                "previous_response_id",
            )
        return prev.conversation

    def _finish(self, stored: Stored[Entry]) -> None:
        entry = stored.value
        if entry.state.status in ("completed", "incomplete"):
            entry.conversation += (Message("assistant", entry.state.output_text),)
        self.store.finish(stored, entry.size())

    @staticmethod
    async def _stream(
        request: web.Request, gen: Job, state: ResponseState, headers: dict[str, str]
    ) -> web.StreamResponse:
        resp = SSEResponse(headers={**SSE_HEADERS, **headers})
        await resp.prepare(request)
        events = Events(state)
        events.start()

        async def flush(batch: list[tuple[int, bytes]], keepalives: int) -> None:
            data = b"".join(e for _, e in batch) + KEEPALIVE * keepalives
            if data:
                await resp.write(data)

        await flush(events.take(), 0)
        await drive(gen, state, events, flush)
        await resp.write_eof()
        return resp

    # -- background -------------------------------------------------------------------------
    async def _background(
        self, request: web.Request, gen: Job, entry: Entry, tenant: str, stream: bool
    ) -> web.StreamResponse:
        log = self.streams.store.open(tenant, KIND)  # (its events: the stream store's bounds)
        if log is None:
            gen.close()
            raise Unavailable(
                "The stream store is full (gateway.streams.max_streams, max_bytes):"
                " try again later, or without background."
            )
        stored = Stored(entry.state.id, tenant, entry, log, entry.size())
        if not self.store.add(stored):
            gen.close()
            log.finish()  # (empty: it goes at its retention, or first when room is needed)
            raise Unavailable(
                "The response store is full (gateway.responses.max_responses, max_bytes):"
                " try again later, or without background."
            )
        task = asyncio.create_task(self._run(gen, stored, log), name=f"response {stored.id}")
        entry.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if stream:
            return await self._follow(request, log, -1, job_headers(gen))
        return web.Response(
            body=encode_response(entry.state), content_type=_JSON, headers=job_headers(gen)
        )

    async def _run(self, gen: Job, stored: Stored[Entry], log: StreamLog) -> None:
        """A background generation, without a client: bounded by the request deadline (the
        job's timer fails it, and cuts this task if it hangs)."""
        s = self.settings
        state = stored.value.state
        events = Events(state)
        events.start()

        async def flush(batch: list[tuple[int, bytes]], keepalives: int) -> None:
            for _, data in batch:  # (numbered as they come: sequence_number + 1)
                log.append(data)

        try:
            await flush(events.take(), 0)
            deadline = asyncio.get_running_loop().time() + s.request_timeout_s
            gen.arm(deadline, s.first_token_timeout_s)
            await drive(gen, state, events, flush)
        except Exception:  # (a bug: this response fails, nothing else does)
            logger.exception("background response %s failed", stored.id)
            state.fail(GatewayError("Internal error."), None)
        finally:
            gen.close()
            state.cancel()  # (cancelled, or cut past its deadline)
            log.finish()
            self._finish(stored)

    async def _follow(
        self,
        request: web.Request,
        log: StreamLog,
        after: int,
        headers: dict[str, str] | None = None,
    ) -> web.StreamResponse:
        s = self.settings
        return await follow(request, log, after, headers or {}, s.keepalive_s, s.request_timeout_s)

    # -- GET /v1/responses/{id}, POST /v1/responses/{id}/cancel -------------------------------
    def _entry(self, request: web.Request) -> Stored[Entry]:
        id = request.match_info["response_id"]
        found = self.store.get(id, self._tenant(request))
        if found is None:
            raise not_found(id)
        return found

    async def retrieve(self, request: web.Request) -> web.StreamResponse:
        found = self._entry(request)
        query = request.query
        stream = query.get("stream", "false").lower()
        if stream not in ("true", "false"):
            raise InvalidRequest("Invalid value for 'stream': must be true or false.", "stream")
        if stream == "false":
            return web.Response(body=encode_response(found.value.state), content_type=_JSON)
        if found.log is None:
            raise InvalidRequest("Only background responses can be streamed again.", "stream")
        after = query.get("starting_after", "-1")
        try:
            seq = int(after)
        except ValueError:
            seq = -2
        if seq < -1:
            raise InvalidRequest(
                "Invalid value for 'starting_after': must be an integer of at least -1.",
                "starting_after",
            )
        # Its events, as the stream store keeps them (past its retention or evicted: gone).
        log = self.streams.store.get(found.log.sid, found.tenant, KIND)
        if log is None:
            raise InvalidRequest(
                "Invalid value for 'starting_after': this response's events are no longer kept.",
                "starting_after",
            )
        return await self._follow(request, log, seq)

    async def cancel(self, request: web.Request) -> web.Response:
        found = self._entry(request)
        entry = found.value
        if found.log is None:
            raise InvalidRequest("Cannot cancel a synchronous response.", "response_id")
        entry.state.cancel()
        await stop(entry.task)
        return web.Response(body=encode_response(entry.state), content_type=_JSON)


def _state_of(decoded: Decoded, model: str, tag: str) -> ResponseState:
    b = decoded.body
    return ResponseState(
        RESPONSE + tag + new_request_id(),
        model,
        background=decoded.background,
        store=decoded.store,
        instructions=b.instructions,
        metadata=b.metadata,
        previous_response_id=b.previous_response_id,
        max_output_tokens=decoded.sampling.max_tokens,
        temperature=decoded.sampling.temperature,
        top_p=decoded.sampling.top_p,
        text=decoded.text,
        tools=b.tools,
        tool_choice=b.tool_choice,
    )


async def _no_flush(batch: list[tuple[int, bytes]], keepalives: int) -> None:
    return None
