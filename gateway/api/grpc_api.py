"""The public gRPC API (protos/shardgate/v1/gateway.proto), plus health and reflection."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any, Final

import grpc
import msgspec
from shardgate.v1 import gateway_pb2 as pb
from shardgate.v1 import gateway_pb2_grpc as pb_grpc

from gateway.api.fanout import Fanout
from gateway.api.forward import WORKER_HEADER, Forwarder
from gateway.api.grpc_chat import apply_controls, prompt_ids
from gateway.api.grpc_forward import forward_resume
from gateway.api.grpc_streams import KIND, GrpcChoices, GrpcRelay, GrpcWriter, resume
from gateway.api.grpc_tools import message_of, tools_of_request
from gateway.api.openai.protocol import MAX_N, sampling_of
from gateway.config.schema import GatewaySettings
from gateway.ids import new_request_id
from gateway.policy import objectives
from gateway.policy.tenants import GRPC_METADATA, bearer_key
from gateway.runtime.fleet import Fleet
from gateway.runtime.job import Job
from gateway.runtime.service import Service
from gateway.streams.ask import GENERATE, RESUMABLE_HEADER, parse_asked
from gateway.streams.hub import Streams
from gateway.streams.owner import STREAM
from gateway.streams.producer import produce, run_detached
from gateway.streams.store import StreamLog
from gateway.types import (
    GatewayError,
    GenerationRequest,
    InvalidRequest,
    Sampling,
)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Gateway"].full_name
LIST_MODELS: Final = f"{SERVICE_NAME}/ListModels"  # (as `gateway.public_routes` names it)

_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    404: grpc.StatusCode.NOT_FOUND,
    413: grpc.StatusCode.INVALID_ARGUMENT,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    499: grpc.StatusCode.CANCELLED,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")  # (whole: no trailing newline)


def status_of(err: GatewayError) -> grpc.StatusCode:
    return _CODES.get(err.status, grpc.StatusCode.INTERNAL)


def trailing(err: GatewayError) -> tuple[tuple[str, str], ...]:
    """Error headers (retry-after, rate limits) as trailing metadata, and the request field at
    fault as `param` (as the OpenAI API's error body names it)."""
    out = tuple((k.lower(), v) for k, v in err.headers)
    return (*out, ("param", err.param)) if err.param else out


def usage_trailer(prompt: int, completion: int) -> tuple[tuple[str, str], ...]:
    """The usage so far of a stream that ends in an error."""
    return (("x-usage-prompt-tokens", str(prompt)), ("x-usage-completion-tokens", str(completion)))


def to_request(m: pb.GenerateRequest, default_max_tokens: int) -> GenerationRequest:
    if not m.model:
        raise InvalidRequest("model is required", "model")
    which = m.WhichOneof("input")
    if which is None:
        raise InvalidRequest("one of prompt, chat or prompt_token_ids is required", "input")
    if which == "chat" and not m.chat.messages:
        raise InvalidRequest("chat.messages must not be empty", "chat.messages")
    if m.max_tokens < 0:
        raise InvalidRequest("max_tokens must be greater than 0", "max_tokens")
    if m.HasField("temperature") and not 0 <= m.temperature <= 2:
        raise InvalidRequest("temperature must be between 0 and 2", "temperature")
    if m.HasField("top_p") and not 0 < m.top_p <= 1:
        raise InvalidRequest("top_p must be in (0, 1]", "top_p")
    if len(m.stop) > 4:
        raise InvalidRequest("at most 4 stop sequences", "stop")
    if m.HasField("n") and not 1 <= m.n <= MAX_N:
        raise InvalidRequest(f"n must be between 1 and {MAX_N}", "n")
    if m.HasField("n") and m.n > 1 and m.HasField("temperature") and m.temperature < 1e-5:
        raise InvalidRequest("n must be 1 with greedy sampling (temperature 0)", "n")
    if m.request_id and not _REQUEST_ID.fullmatch(m.request_id):
        raise InvalidRequest("request_id must be 1-128 of [A-Za-z0-9._:-]", "request_id")
    out = GenerationRequest(
        request_id=m.request_id or new_request_id(),
        model=m.model,
        sampling=sampling_of(
            sampling_fields(m),
            default_max_tokens,
            m.logprobs if m.HasField("logprobs") else None,
        ),
        prompt=m.prompt if which == "prompt" else None,
        messages=(tuple(message_of(x) for x in m.chat.messages) if which == "chat" else None),
        prompt_token_ids=prompt_ids(m) if which == "prompt_token_ids" else None,
        stream=True,
        priority=m.priority if m.HasField("priority") else None,
        session_id=m.session_id,
    )
    out.generation.tools = tools_of_request(m)
    out.objective = objectives.parse(
        m.slo_ttft_ms if m.HasField("slo_ttft_ms") else None,
        m.slo_tpot_ms if m.HasField("slo_tpot_ms") else None,
    )
    apply_controls(m, out, which == "chat")
    if m.HasField("n"):
        out.n = m.n
    return out


# GenerateRequest's sampling fields: those named as the one definition's (params.Sampling), so
# a field added there is a field here or a parity test fails (tests/unit/test_params.py).
_SAMPLING: Final = frozenset(f.name for f in msgspec.structs.fields(Sampling)) - {
    "max_tokens",
    "ignore_eos",
    "logprobs",  # (its own argument)
    "n",  # (the gateway's: n engine requests)
}
_FIELDS: Final = [f for f in pb.GenerateRequest.DESCRIPTOR.fields if f.name in _SAMPLING]


def sampling_fields(m: pb.GenerateRequest) -> dict[str, Any]:
    """The request's sampling fields by their OpenAI names (what is set, nothing else)."""
    out: dict[str, Any] = {"max_tokens": m.max_tokens or None, "ignore_eos": m.ignore_eos}
    for f in _FIELDS:
        value = getattr(m, f.name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            if value:
                out[f.name] = {str(k): v for k, v in value.items()}  # JSON's keys: strings
        elif f.is_repeated:
            if value:
                out[f.name] = list(value)
        elif m.HasField(f.name):
            out[f.name] = value
    if m.HasField("structured_outputs"):
        kind = m.structured_outputs.WhichOneof("kind")
        if kind is not None:
            value = getattr(m.structured_outputs, kind)
            out["structured_outputs"] = {kind: list(value.choices) if kind == "choice" else value}
    return out


class GatewayServicer(pb_grpc.GatewayServicer):
    def __init__(
        self,
        fleet: Fleet,
        service: Service,
        settings: GatewaySettings,
        streams: Streams | None = None,
    ) -> None:
        self._fleet = fleet
        self._service = service
        self.settings = settings
        self.streams = streams
        # --workers N: a Resume of a sibling's stream goes to it (gateway/api/grpc_forward.py).
        self.forwarder: Forwarder | None = None

    async def ListModels(
        self, request: pb.ListModelsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListModelsResponse:
        if LIST_MODELS not in self.settings.public_routes:
            key = bearer_key(dict(context.invocation_metadata() or ()).get("authorization"))
            try:
                self._service.tenants.resolve(key, GRPC_METADATA)
            except GatewayError as e:
                await context.abort(status_of(e), e.message, trailing(e))
        out = pb.ListModelsResponse()
        for name, (max_len, replicas) in sorted(self._fleet.models().items()):
            out.models.add(id=name, max_model_len=max_len, replicas=replicas)
        return out

    async def Generate(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GenerateResponse]:
        rid = request.request_id if _REQUEST_ID.fullmatch(request.request_id) else ""
        try:
            metadata = dict(context.invocation_metadata() or ())
            key = bearer_key(metadata.get("authorization"))
            self._service.tenants.resolve(key, GRPC_METADATA)  # (its 401 names the metadata)
            req = to_request(request, self.settings.default_max_tokens)
            rid = req.request_id
            req.resumable = parse_asked(metadata.get(RESUMABLE_HEADER))
            if req.n > 1:
                fan = Fanout(self._service, req)
                try:
                    await fan.submit(key)
                except BaseException:  # refused, or the client left: none of it runs
                    await fan.close()
                    raise
            else:
                gen = await self._service.submit(req, key)
        except GatewayError as e:  # (refused: its id in the trailers, as streams have it first)
            ids = (("x-request-id", rid or new_request_id()),)
            await context.abort(status_of(e), e.message, (*trailing(e), *ids))
        if req.n > 1:
            async for out in self._choices(fan, context):
                yield out
            return
        deadline = asyncio.get_running_loop().time() + self.settings.request_timeout_s
        gen.arm(deadline, self.settings.first_token_timeout_s)
        relay = GrpcRelay(req)
        writer = GrpcWriter()
        handed = False
        try:
            batch = await gen.take()
            while batch and not gen.began:  # keep-alives while queued: HTTP/2 pings do that
                batch = await gen.take()
            initial = [("x-request-id", req.request_id), *gen.headers]
            if gen.first_replica:
                initial.append(("x-shardgate-replica", gen.first_replica))
            if self.streams is not None:
                kept: dict[str, str] = {}
                relay.log = self.streams.open(gen.tenant, kept, GENERATE, req.resumable, KIND)
                initial.extend(kept.items())
                if relay.log is not None:
                    relay.log.attach(writer)
            await context.send_initial_metadata(tuple(initial))
            while batch:
                relay.add(batch)
                for out in relay.take():
                    yield out
                if writer.gone:  # another reader took the stream: it goes on for that one
                    handed = self._detach(gen, relay, writer)
                    await context.abort(grpc.StatusCode.ABORTED, "Another reader took the stream.")
                batch = await gen.take()
        except GatewayError as e:
            relay.ended = True
            await context.abort(
                status_of(e),
                e.message,
                (*trailing(e), *usage_trailer(relay.prompt, relay.counted)),
            )
        except (asyncio.CancelledError, GeneratorExit):
            handed = handed or self._detach(gen, relay, writer)
            raise
        finally:
            if not handed:
                if relay.log is not None:
                    relay.log.detach(writer)
                    relay.log.finish()
                gen.close()

    def _detach(self, gen: Job, relay: GrpcRelay, writer: GrpcWriter) -> bool:
        """The caller left (or was replaced) mid-stream: the rest goes on for a reader that
        reattaches, as for HTTP streams (gateway.detach_grace_s)."""
        log = relay.log
        if log is None or self.streams is None or relay.ended or gen.timed_out:
            return False
        log.detach(writer)
        grace = self.settings.detach_grace_s
        if grace <= 0 and log.reader is None:
            return False
        self.streams.detached.adopt(
            run_detached(gen, relay, log, grace), f"detached-{gen.request.request_id}"
        )
        return True

    async def Resume(
        self, request: pb.ResumeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GenerateResponse]:
        if self.streams is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"No stream `{request.stream_id}`.")
            return
        metadata = dict(context.invocation_metadata() or ())
        fwd = self.forwarder
        if fwd is not None:  # (--workers N: which worker keeps it, and which took the call)
            await context.send_initial_metadata(((WORKER_HEADER, str(fwd.index)),))
            owner = fwd.sibling(request.stream_id, STREAM)
            if owner is not None:
                auth = metadata.get("authorization")
                async for out in forward_resume(fwd, owner, request, auth, context):
                    yield out
                return
        try:
            key = bearer_key(metadata.get("authorization"))
            tenant = self._service.tenants.resolve(key, GRPC_METADATA)
        except GatewayError as e:
            await context.abort(status_of(e), e.message, trailing(e))
        async for kept in resume(
            self.streams, tenant.name, request, context, self.settings.keepalive_s
        ):
            if kept is not None:
                yield kept

    async def _choices(
        self, fan: Fanout, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GenerateResponse]:
        """n > 1: each choice's responses carry its `index`; its last one, its finish reason and
        usage (the prompt counted in each: the total is the prompt once and every choice's).
        Kept for Resume as a single stream is, and detached from a caller that leaves as it is:
        the choices run on for `detach_grace_s`."""
        req = fan.req
        enc = GrpcChoices(fan.jobs[0].request, req.n)
        writer = GrpcWriter()
        log: StreamLog | None = None
        handed = False
        deadline = asyncio.get_running_loop().time() + self.settings.request_timeout_s
        try:
            fan.arm(deadline, self.settings.first_token_timeout_s)
            initial = [("x-request-id", req.request_id), *fan.jobs[0].headers]
            if self.streams is not None:
                kept: dict[str, str] = {}
                log = self.streams.open(fan.jobs[0].tenant, kept, GENERATE, req.resumable, KIND)
                initial.extend(kept.items())
                if log is not None:
                    enc.keep(log)
                    log.attach(writer)
            await context.send_initial_metadata(tuple(initial))
            while fan.left:
                enc.add(await fan.next())
                for out in enc.take():
                    yield out
                if writer.gone:  # another reader took the stream: it goes on for that one
                    handed = self._detach_choices(fan, enc, log, writer)
                    await context.abort(grpc.StatusCode.ABORTED, "Another reader took the stream.")
            enc.end()
        except GatewayError as e:
            enc.ended = True
            await context.abort(
                status_of(e), e.message, (*trailing(e), *usage_trailer(enc.prompt, enc.counted))
            )
        except (asyncio.CancelledError, GeneratorExit):
            handed = handed or self._detach_choices(fan, enc, log, writer)
            raise
        finally:
            if not handed:
                if log is not None:
                    log.detach(writer)
                    log.finish()
                await fan.close()

    def _detach_choices(
        self, fan: Fanout, enc: GrpcChoices, log: StreamLog | None, writer: GrpcWriter
    ) -> bool:
        """n > 1: as `_detach` (gateway/streams/producer.py `produce` takes the Fanout)."""
        if log is None or self.streams is None or enc.ended:
            return False
        if any(job.timed_out for job in fan.jobs):
            return False
        log.detach(writer)
        grace = self.settings.detach_grace_s
        if grace <= 0 and log.reader is None:
            return False
        fan.detach()
        self.streams.detached.adopt(produce(fan, enc, log, grace), f"detached-{fan.req.request_id}")
        return True
