"""Sends one request over gRPC and verifies its stream: the gateway's public API
(shardgate.v1.Gateway/Generate) or one sidecar directly (shardgate.engine.v1.Engine/Generate).

Checked: the status, a finish on the last message, usage on the last message (gateway:
prompt + completion == total), tokens counted == completion tokens, and with ignore_eos
completion == max_tokens.
"""

from __future__ import annotations

import itertools
import time
from typing import Protocol

import grpc
from shardgate.v1 import engine_pb2 as epb
from shardgate.v1 import engine_pb2_grpc as epb_grpc
from shardgate.v1 import gateway_pb2 as gpb
from shardgate.v1 import gateway_pb2_grpc as gpb_grpc
from shardgate.v1 import params

from bench import result as kinds
from bench.plan import RequestSpec
from bench.result import Result, TokenClock
from bench.scenario import Scenario

STREAMS_PER_CHANNEL = 100


class _Channels:
    """Enough HTTP/2 connections for the concurrency (each its own subchannel)."""

    def __init__(self, target: str, concurrency: int) -> None:
        n = max(1, -(-concurrency // STREAMS_PER_CHANNEL))
        options = [("grpc.use_local_subchannel_pool", 1)]
        self.channels = [grpc.aio.insecure_channel(target, options=options) for _ in range(n)]

    async def close(self) -> None:
        for ch in self.channels:
            await ch.close(None)


def _status_kind(e: grpc.aio.AioRpcError) -> str:
    if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        return kinds.TIMEOUT
    return kinds.grpc_status(e.code().name)


class GatewayTarget:
    def __init__(self, target: str, scenario: Scenario) -> None:
        self.address = target
        self._scenario = scenario
        self._channels = _Channels(target, scenario.concurrency)
        self._stubs = [gpb_grpc.GatewayStub(ch) for ch in self._channels.channels]
        self._next = itertools.cycle(range(len(self._stubs)))
        self._metadata: list[tuple[tuple[str, str], ...]] = [()]
        if scenario.classes:
            self._metadata = [
                (("authorization", f"Bearer {c.api_key}"),) if c.api_key else ()
                for c in scenario.classes
            ]

    def message(self, spec: RequestSpec) -> gpb.GenerateRequest:
        s = self._scenario
        req = gpb.GenerateRequest(
            model=s.model, max_tokens=spec.max_tokens, ignore_eos=s.ignore_eos
        )
        if s.endpoint == "chat":
            req.chat.messages.add(role="user", content=spec.prompt)
        else:
            req.prompt = spec.prompt
        if s.classes and (priority := s.classes[spec.cls].priority) is not None:
            req.priority = priority
        return req

    async def __call__(self, spec: RequestSpec) -> Result:
        s = self._scenario
        stub = self._stubs[next(self._next)]
        msg = self.message(spec)
        clock = TokenClock(time.perf_counter())
        errors: list[str] = []
        detail = ""
        last: gpb.GenerateResponse | None = None
        early_usage = False
        try:
            call = stub.Generate(
                msg, timeout=s.request_timeout_s, metadata=self._metadata[spec.cls]
            )
            async for r in call:
                n = len(r.token_ids)
                if n:
                    clock.tick(time.perf_counter(), n)
                if last is not None and last.HasField("usage"):
                    early_usage = True
                last = r
        except grpc.aio.AioRpcError as e:
            errors.append(_status_kind(e))
            detail = f"{errors[0]}: {e.details()}"
        end = time.perf_counter()
        prompt = 0
        if not errors:
            if last is None or not last.finish_reason:
                errors.append(kinds.MISSING_FINISH)
            if last is None or not last.HasField("usage") or early_usage:
                errors.append(kinds.MISSING_USAGE)
            else:
                u = last.usage
                prompt = u.prompt_tokens
                if u.prompt_tokens + u.completion_tokens != u.total_tokens:
                    errors.append(kinds.USAGE_SUM)
                if u.completion_tokens != clock.tokens:
                    errors.append(kinds.TOKEN_COUNT)
                    detail = (
                        f"{kinds.TOKEN_COUNT}: {clock.tokens} tokens, usage {u.completion_tokens}"
                    )
                if s.ignore_eos and u.completion_tokens != spec.max_tokens:
                    errors.append(kinds.MAX_TOKENS)
        return Result.from_clock(spec.index, spec.cls, clock, end, prompt, errors, detail)

    async def close(self) -> None:
        await self._channels.close()


class LastDelta(Protocol):
    """The fields of engine.proto `Delta` that end a request (pb or the TCP link's)."""

    @property
    def finish(self) -> int: ...
    @property
    def error_code(self) -> int: ...
    @property
    def error_message(self) -> str: ...
    @property
    def completion_tokens(self) -> int: ...


def check_last_delta(
    last: LastDelta | None, clock: TokenClock, s: Scenario, spec: RequestSpec, errors: list[str]
) -> str:
    """Checks an engine stream's final delta against what was counted; appends the kinds of
    errors found to `errors` and returns the detail of the first."""
    if last is None or last.finish == epb.FINISH_NONE:
        errors.append(kinds.MISSING_FINISH)
    elif last.finish == epb.FINISH_ERROR or last.error_code:
        errors.append(kinds.ERROR_EVENT)
        return f"{kinds.ERROR_EVENT}: {last.error_message}"
    else:
        if last.completion_tokens != clock.tokens:
            errors.append(kinds.TOKEN_COUNT)
        if s.ignore_eos and last.completion_tokens != spec.max_tokens:
            errors.append(kinds.MAX_TOKENS)
    return ""


def generation(s: Scenario, spec: RequestSpec) -> params.Generation:
    """A bench request's engine parameters (the engine and link targets share them)."""
    chat = s.endpoint == "chat"
    return params.Generation(
        request_id=f"bench-{spec.index}",
        model=s.model,
        sampling=params.Sampling(max_tokens=spec.max_tokens, ignore_eos=s.ignore_eos),
        prompt=None if chat else spec.prompt,
        messages=(params.Message("user", spec.prompt),) if chat else None,
    )


def engine_request(s: Scenario, spec: RequestSpec) -> epb.SubmitRequest:
    return epb.SubmitRequest(generation=params.encode(generation(s, spec)))


class EngineTarget:
    """One sidecar's per-request Generate stream: the engine without the gateway."""

    def __init__(self, target: str, scenario: Scenario) -> None:
        self.address = target
        self._scenario = scenario
        self._channels = _Channels(target, scenario.concurrency)
        self._stubs = [epb_grpc.EngineStub(ch) for ch in self._channels.channels]
        self._next = itertools.cycle(range(len(self._stubs)))

    def message(self, spec: RequestSpec) -> epb.SubmitRequest:
        return engine_request(self._scenario, spec)

    async def __call__(self, spec: RequestSpec) -> Result:
        s = self._scenario
        stub = self._stubs[next(self._next)]
        clock = TokenClock(time.perf_counter())
        errors: list[str] = []
        detail = ""
        prompt = 0
        last: epb.Delta | None = None
        try:
            async for d in stub.Generate(self.message(spec), timeout=s.request_timeout_s):
                n = len(d.token_ids)
                if n:
                    clock.tick(time.perf_counter(), n)
                prompt = d.prompt_tokens or prompt
                last = d
        except grpc.aio.AioRpcError as e:
            errors.append(_status_kind(e))
            detail = f"{errors[0]}: {e.details()}"
        end = time.perf_counter()
        if not errors:
            detail = check_last_delta(last, clock, s, spec, errors)
        return Result.from_clock(spec.index, spec.cls, clock, end, prompt, errors, detail)

    async def close(self) -> None:
        await self._channels.close()
