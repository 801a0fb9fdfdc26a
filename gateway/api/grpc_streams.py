"""The gRPC API's kept streams: each GenerateResponse numbered (`stream_id`, `seq`) and kept
serialized in the stream's log; Resume replays them after `after_seq` and follows live."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import NoReturn, Protocol

import grpc
from shardgate.v1 import gateway_pb2 as pb

from gateway.api.grpc_tools import fill_parsed
from gateway.api.openai.answer import Answer
from gateway.api.openai.resume import Follower
from gateway.streams.hub import Streams
from gateway.streams.store import REPLAY_BATCH, StreamLog
from gateway.types import FINISH_REASON, Delta, GatewayError, GenerationRequest, Logprobs

KIND = "grpc"


def fill_logprobs(out: pb.GenerateResponse, lps: list[Logprobs]) -> None:
    for lp in lps:
        entries = out.logprobs.add().entries
        for token_id, token, logprob in zip(lp.ids, lp.tokens, lp.logprobs, strict=True):
            entries.add(token_id=token_id, token=token, logprob=logprob)


def fill_prompt_logprobs(out: pb.GenerateResponse, lps: list[Logprobs]) -> None:
    for lp in lps:
        entries = out.prompt_logprobs.add().entries
        if not lp.logprobs:  # the first token: its id and text only
            entries.add(token_id=lp.ids[0], token=lp.tokens[0])
            continue
        for i, token_id in enumerate(lp.ids):
            entries.add(
                token_id=token_id,
                token=lp.tokens[i],
                logprob=lp.logprobs[i],
                rank=lp.ranks[i] if i < len(lp.ranks) else None,
            )


class GrpcRelay:
    """A generation's responses, from its deltas (see run_detached's Encoder)."""

    __slots__ = ("answer", "cached", "counted", "ended", "index", "log", "out", "prompt", "req")

    def __init__(self, req: GenerationRequest, index: int = 0) -> None:
        """`index`: the choice its responses are of (n > 1)."""
        self.req = req
        self.index = index
        self.answer = Answer(req.generation.tools, req.hide_reasoning)
        self.counted = 0
        self.prompt = 0
        self.cached = 0
        self.log: StreamLog | None = None
        self.out: list[pb.GenerateResponse] = []
        self.ended = False

    def add(self, batch: list[Delta]) -> None:
        log = self.log
        for d in batch:
            self.counted += len(d.token_ids)
            if d.prompt_tokens:
                self.prompt, self.cached = d.prompt_tokens, d.cached_tokens
            if not (d.token_ids or d.text or d.finish or d.prompt_tokens):
                continue  # a keep-alive while queued: HTTP/2 pings do that here
            out = pb.GenerateResponse(token_ids=d.token_ids, text=d.text)
            if self.index:
                out.index = self.index
            if d.logprobs:
                fill_logprobs(out, d.logprobs)
            if d.prompt_logprobs:
                fill_prompt_logprobs(out, d.prompt_logprobs)
            if d.parsed:
                fill_parsed(out, self.answer.add(d.parsed))
            if d.finish:
                self.ended = True
                completion = d.completion_tokens or self.counted
                reason = FINISH_REASON.get(d.finish, "stop")
                out.finish_reason = self.answer.finish_reason(reason, whole=False)
                out.model = self.req.served_model
                out.usage.prompt_tokens = self.prompt
                out.usage.completion_tokens = completion
                out.usage.total_tokens = self.prompt + completion
                out.usage.cached_tokens = self.cached
            if log is not None:
                out.stream_id = log.sid
                out.seq = log.next_seq
                log.append(out.SerializeToString())
            self.out.append(out)

    def end(self) -> None:
        self.ended = True

    def error(self, e: GatewayError) -> None:
        self.ended = True  # (a status, not a response: a reader learns it from the log's end)

    def take(self) -> list[pb.GenerateResponse]:
        out, self.out = self.out, []
        return out


class GrpcChoices:
    """n > 1: every choice's responses (each with its `index`), in the order they come, kept
    in one log (see the detached producer's Encoder; its items: a choice's index and batch)."""

    __slots__ = ("ended", "out", "relays")

    def __init__(self, req: GenerationRequest, n: int) -> None:
        self.out: list[pb.GenerateResponse] = []
        self.relays = [GrpcRelay(req, i) for i in range(n)]
        for r in self.relays:
            r.out = self.out  # (one list: the responses in the order they were made)
        self.ended = False

    def keep(self, log: StreamLog) -> None:
        for r in self.relays:
            r.log = log

    @property
    def prompt(self) -> int:
        return self.relays[0].prompt

    @property
    def counted(self) -> int:
        return sum(r.counted for r in self.relays)

    def add(self, item: tuple[int, list[Delta]]) -> None:
        index, batch = item
        self.relays[index].add(batch)

    def end(self) -> None:
        self.ended = True

    def error(self, e: GatewayError) -> None:
        self.ended = True  # (a status: a reader learns it from the log's end)

    def take(self) -> list[pb.GenerateResponse]:
        out = list(self.out)
        self.out.clear()
        return out


class Aborts(Protocol):
    """Where a Resume's status goes: the RPC's context, or a forwarded Resume's channel."""

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn: ...


class GrpcWriter:
    """The stream's own caller, as its first reader: `gone` once another reader took it."""

    __slots__ = ("gone",)

    def __init__(self) -> None:
        self.gone = False

    def replaced(self) -> None:
        self.gone = True


async def resume(
    streams: Streams,
    tenant: str,
    request: pb.ResumeRequest,
    context: Aborts,
    wait_s: float,
) -> AsyncIterator[pb.GenerateResponse | None]:
    """Stream `request.stream_id`'s responses after `after_seq`, then the live ones; None
    each time `wait_s` passed with nothing new (a keep-alive, for a forwarded Resume)."""
    log = streams.store.get(request.stream_id, tenant, KIND)
    if log is None:
        await context.abort(grpc.StatusCode.NOT_FOUND, f"No stream `{request.stream_id}`.")
        return
    after = request.after_seq
    events = log.since(after, REPLAY_BATCH)
    if events is None:
        await context.abort(
            grpc.StatusCode.OUT_OF_RANGE, f"Responses up to {log.first - 1} are no longer kept."
        )
        return
    follower = Follower()
    log.attach(follower)
    streams.resumed("grpc")
    try:
        while True:
            if events is None:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "The stream is no longer kept.")
                return
            for ev in events:
                yield pb.GenerateResponse.FromString(ev)
            after += len(events)
            if follower.gone:
                await context.abort(grpc.StatusCode.ABORTED, "Another reader took the stream.")
            if log.finished and after + 1 >= log.next_seq:
                break
            changed = log.changed()
            events = log.since(after, REPLAY_BATCH)
            if events == []:
                done, _ = await asyncio.wait({changed}, timeout=wait_s)
                if not done:
                    yield None
                events = log.since(after, REPLAY_BATCH)
    finally:
        log.detach(follower)
    tail = log.last() or b""
    if not tail or not pb.GenerateResponse.FromString(tail).finish_reason:
        await context.abort(grpc.StatusCode.UNAVAILABLE, "The stream ended before its end.")
