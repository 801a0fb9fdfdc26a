"""One generation's deltas -> the gRPC API's GenerateResponses (one choice of it, with n > 1)."""

from __future__ import annotations

from collections.abc import Iterator

from shardgate.v1 import gateway_pb2 as pb

from gateway.api.grpc_tools import fill_parsed
from gateway.api.openai.answer import Answer
from gateway.types import FINISH_REASON, Delta, GenerationRequest, Logprobs


def fill_logprobs(out: pb.GenerateResponse, lps: list[Logprobs]) -> None:
    for lp in lps:
        entries = out.logprobs.add().entries
        for token_id, token, logprob in zip(lp.ids, lp.tokens, lp.logprobs, strict=True):
            entries.add(token_id=token_id, token=token, logprob=logprob)


class Rendering:
    """A choice's responses, its usage so far (for the error trailer)."""

    __slots__ = ("answer", "cached", "counted", "index", "model", "prompt")

    def __init__(self, req: GenerationRequest, index: int = 0) -> None:
        self.answer = Answer(req.generation.tools)
        self.model = req.served_model
        self.index = index
        self.counted = 0
        self.prompt = 0
        self.cached = 0

    def responses(self, batch: list[Delta]) -> Iterator[pb.GenerateResponse]:
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
            if d.parsed:
                fill_parsed(out, self.answer.add(d.parsed))
            if d.finish:
                completion = d.completion_tokens or self.counted
                reason = FINISH_REASON.get(d.finish, "stop")
                out.finish_reason = self.answer.finish_reason(reason, whole=False)
                out.model = self.model
                out.usage.prompt_tokens = self.prompt
                out.usage.completion_tokens = completion
                out.usage.total_tokens = self.prompt + completion
                out.usage.cached_tokens = self.cached
            yield out
