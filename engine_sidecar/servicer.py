"""The Engine gRPC service: Link (multiplexed), Generate (one request) and Info."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import AsyncIterator, Coroutine
from typing import Any, NoReturn, cast

import grpc
from shardgate.v1 import engine_pb2 as pb
from shardgate.v1 import engine_pb2_grpc as pb_grpc
from shardgate.v1 import params

from engine_sidecar import convert, loras
from engine_sidecar.backend import Backend, ErrorCode, RequestError, Tokenizes
from engine_sidecar.backends.sim import SimFaults
from engine_sidecar.config import SidecarConfig
from engine_sidecar.hub import Hub, Outbox
from engine_sidecar.kv_mirror import KvMirror
from engine_sidecar.link import LinkSession

_STATUS = {
    ErrorCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.INTERNAL: grpc.StatusCode.INTERNAL,
}


def kv_mirror(backend: Backend) -> KvMirror | None:
    """The backend's KV cache mirror, when it reports its cache (backend.ReportsKv)."""
    kv = getattr(backend, "kv", None)
    return kv if isinstance(kv, KvMirror) else None


class EngineServicer(pb_grpc.EngineServicer):
    def __init__(self, config: SidecarConfig, backend: Backend, hub: Hub) -> None:
        self._config = config
        self._backend = backend
        self._hub = hub
        self.sidecar_id = f"{config.name}-{uuid.uuid4().hex[:8]}"
        self.links = 0
        self.link_port = 0  # the TCP link's port, once bound (0: none)
        self.stop_heartbeats = config.sim.faults.stop_heartbeats
        self.sessions: set[LinkSession] = set()  # the live links (to announce changes on)
        self._lora_lock = asyncio.Lock()  # one adapter change at a time

    def info_reply(self) -> pb.InfoReply:
        c = self._config
        reply = pb.InfoReply()
        convert.fill_info(
            reply,
            sidecar_id=self.sidecar_id,
            info=self._backend.info(),
            group=c.group,
            rank=c.rank,
            world_size=c.world_size,
            heartbeat_interval_s=c.heartbeat_interval_s,
        )
        convert.fill_load(reply.load, 0, self._backend.load(), self._hub.inflight)
        reply.link_port = self.link_port
        return reply

    def link_session(self) -> LinkSession:
        c = self._config
        return LinkSession(
            self._hub,
            self.info_reply,
            self._backend.load,
            c.heartbeat_interval_s,
            c.max_link_pending,
            lambda: not self.stop_heartbeats,
            self.sessions,
            kv_mirror(self._backend),
        )

    def reannounce(self) -> None:
        """What the sidecar serves changed: tell every link (before anything else it sends)."""
        info = self.info_reply()
        for session in self.sessions:
            session.announce(info)

    async def Info(
        self, request: pb.InfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.InfoReply:
        return self.info_reply()

    async def Link(
        self, request_iterator: AsyncIterator[pb.LinkRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.LinkResponse]:
        theirs = dict(context.invocation_metadata() or ()).get(params.PROTOCOL_METADATA, "1")
        if theirs != str(params.PROTOCOL_VERSION):
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"the gateway speaks link protocol {theirs}, this sidecar "
                f"{params.PROTOCOL_VERSION}: run the same shardgate version on both",
            )
        session = self.link_session()
        requests = (
            ([(sub.key, convert.to_request(sub, 0)) for sub in m.submits], m.aborts)
            async for m in request_iterator
        )
        self.links += 1
        try:
            async for batch in session.run(requests):
                yield convert.link_response(*batch)
        finally:
            self.links -= 1

    def _tokenizes(self) -> Tokenizes | None:
        backend = self._backend
        if callable(getattr(backend, "tokenize", None)) and callable(
            getattr(backend, "detokenize", None)
        ):
            return cast(Tokenizes, backend)
        return None

    async def _unimplemented(self, context: grpc.aio.ServicerContext) -> NoReturn:
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED, "this engine does not tokenize for clients"
        )
        raise AssertionError("unreachable")  # (abort raises)

    async def _refuse(self, context: grpc.aio.ServicerContext, e: RequestError) -> NoReturn:
        status = _STATUS.get(e.code, grpc.StatusCode.INTERNAL)
        await context.abort(status, e.message, (("field", e.field),) if e.field else ())
        raise AssertionError("unreachable")

    async def Tokenize(
        self, request: pb.TokenizeRequest, context: grpc.aio.ServicerContext
    ) -> pb.TokenizeReply:
        backend = self._tokenizes()
        if backend is None:
            await self._unimplemented(context)
        try:
            ids = backend.tokenize(
                convert.to_request(pb.SubmitRequest(generation=request.generation), 0)
            )
            if inspect.isawaitable(ids):  # (a backend that asks its engine server)
                ids = await ids
        except RequestError as e:
            await self._refuse(context, e)
        max_len = next((m.max_model_len for m in self._backend.info().models), 0)
        return pb.TokenizeReply(tokens=ids, max_model_len=max_len)

    async def Detokenize(
        self, request: pb.DetokenizeRequest, context: grpc.aio.ServicerContext
    ) -> pb.DetokenizeReply:
        backend = self._tokenizes()
        if backend is None:
            await self._unimplemented(context)
        try:
            text = backend.detokenize(request.model, list(request.tokens))
            if inspect.isawaitable(text):
                text = await text
        except RequestError as e:
            await self._refuse(context, e)
        return pb.DetokenizeReply(prompt=text)

    async def LoadLora(
        self, request: pb.LoadLoraRequest, context: grpc.aio.ServicerContext
    ) -> pb.LoraReply:
        async with self._lora_lock:
            await self._lora_change(context, loras.load(self._backend, request.name, request.path))
        return self._lora_reply()

    async def UnloadLora(
        self, request: pb.UnloadLoraRequest, context: grpc.aio.ServicerContext
    ) -> pb.LoraReply:
        async with self._lora_lock:
            await self._lora_change(context, loras.unload(self._backend, request.name))
        return self._lora_reply()

    async def _lora_change(
        self, context: grpc.aio.ServicerContext, change: Coroutine[Any, Any, None]
    ) -> None:
        try:
            await change
        except loras.Unsupported as e:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, str(e))
        except RequestError as e:
            await self._refuse(context, e)
        self.reannounce()

    def _lora_reply(self) -> pb.LoraReply:
        return pb.LoraReply(models=self.info_reply().models)

    async def SetFaults(self, request: pb.Faults, context: grpc.aio.ServicerContext) -> pb.Faults:
        if not self._config.allow_fault_injection:
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED, "fault injection is off for this sidecar"
            )
        set_faults = getattr(self._backend, "set_faults", None)
        engine_faults = (
            request.HasField("crash_after_tokens")
            or request.HasField("hang_after_tokens")
            or request.slow_token_s
            or request.error_rate
        )
        if engine_faults and set_faults is None:
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED, "this backend takes no engine faults"
            )
        if set_faults is not None:
            try:
                faults = SimFaults(
                    crash_after_tokens=(
                        request.crash_after_tokens
                        if request.HasField("crash_after_tokens")
                        else None
                    ),
                    hang_after_tokens=(
                        request.hang_after_tokens if request.HasField("hang_after_tokens") else None
                    ),
                    slow_token_s=request.slow_token_s,
                    error_rate=request.error_rate,
                    stop_heartbeats=request.stop_heartbeats,
                )
            except ValueError as e:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            set_faults(faults)
        self.stop_heartbeats = request.stop_heartbeats
        return request

    async def Generate(
        self, request: pb.SubmitRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.Delta]:
        box = Outbox(self._config.max_link_pending)
        try:
            self._hub.submit(box, 0, convert.to_request(request, 0))
        except RequestError as e:
            await context.abort(_STATUS.get(e.code, grpc.StatusCode.INTERNAL), e.message)
        try:
            while True:
                await box.wait()
                for key, d in box.take():
                    out = pb.Delta()
                    convert.fill_delta(out, key, d)
                    yield out
                    if d.finish:
                        return
        finally:
            self._hub.release(box)
