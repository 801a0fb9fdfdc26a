"""The gateway core's own request and output types (wire types stay at the edges)."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

# Defined once, with the link's parameters; the core names them from here.
from shardgate.v1.params import Finish as Finish
from shardgate.v1.params import Generation, GenerationView
from shardgate.v1.params import Logprobs as Logprobs
from shardgate.v1.params import Message as Message
from shardgate.v1.params import Sampling as Sampling

FINISH_REASON = {Finish.STOP: "stop", Finish.LENGTH: "length"}


@dataclass(frozen=True, slots=True)
class UnknownFields:
    """The top-level fields of a request's body that its API declares none for (accepted and
    ignored, or refused: gateway/policy/unknown_fields.py): the first few names, in the body's
    order (bounded: the policy's), and how many there were."""

    names: tuple[str, ...]
    count: int


@dataclass(frozen=True, slots=True)
class Objective:
    """A request's latency targets, in seconds; None: no target on that figure."""

    ttft_s: float | None = None
    tpot_s: float | None = None


class GenerationRequest(GenerationView):
    """A validated request, whichever API it came from: the engine's parameters (`generation`,
    sent to the sidecar as they are) and what only the gateway uses. Exactly one of
    prompt/messages/prompt_token_ids is set."""

    __slots__ = (
        "_priority",
        "batch",
        "continuous_usage",
        "echo",
        "echo_prompt",
        "generation",
        "hide_reasoning",
        "include_usage",
        "n",
        "objective",
        "resumable",
        "return_token_ids",
        "session_id",
        "stream",
        "unknown_fields",
    )

    def __init__(
        self,
        request_id: str,
        model: str,
        sampling: Sampling,
        prompt: str | None = None,
        messages: tuple[Message, ...] | None = None,
        stream: bool = False,
        include_usage: bool = False,
        priority: int | None = None,
        session_id: str = "",
        lora: str = "",
        prompt_token_ids: tuple[int, ...] | None = None,
    ) -> None:
        self.generation = Generation(
            request_id=request_id,
            model=model,
            sampling=sampling,
            prompt=prompt,
            messages=messages,
            prompt_token_ids=prompt_token_ids,
            priority=priority or 0,
            lora=lora,
            parse_whole=not stream,
        )
        self.stream = stream
        self.include_usage = include_usage
        self.session_id = session_id
        self.echo = False  # completions: the prompt comes back before the completion
        self.n = 1  # choices: n > 1 runs as n engine requests (child)
        self.return_token_ids = False  # the answer carries the prompt's and choices' token ids
        self.continuous_usage = False  # every chunk of the stream carries the usage so far
        self.hide_reasoning = False  # chat's include_reasoning false: the answer has none
        self.echo_prompt = ""  # echo of a prompt of token ids: their text (asked of a replica)
        # A batch of prompts (completions): each a text or token ids; n choices each, choice
        # p * n + i of prompt p. Empty: the one prompt of the generation.
        self.batch: tuple[str | tuple[int, ...], ...] = ()
        self._priority = priority  # None: the client asked for no class
        # Its stream kept for resume (true) or not (false): the request's word; None: it said
        # nothing (its tenant's or route's then: gateway/streams/ask.py).
        self.resumable: bool | None = None
        # Its body's fields that its API declares none for (None: none).
        self.unknown_fields: UnknownFields | None = None
        # Its latency targets (`x-slo-ttft-ms`, `x-slo-tpot-ms`); None: its class's, if any.
        self.objective: Objective | None = None

    def _key(self) -> tuple[object, ...]:
        return (
            self.generation,
            self.stream,
            self.include_usage,
            self.session_id,
            self._priority,
            self.echo,
            self.n,
            self.return_token_ids,
            self.continuous_usage,
            self.batch,
            self.hide_reasoning,
            self.echo_prompt,
            self.resumable,
            self.unknown_fields,
            self.objective,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GenerationRequest):
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]  # (mutable)

    def __repr__(self) -> str:
        return f"GenerationRequest{self._key()!r}"

    def child(self, index: int) -> GenerationRequest:
        """The engine request of choice `index` of n, as vLLM's parallel sampling makes it: its
        own id, and with a seed, the seed plus its index."""
        g = self.generation
        seed = g.sampling.seed
        prompt, i = divmod(index, self.n)  # (of a batch: each prompt's choices as n of one)
        if seed is not None:
            sampling = msgspec.structs.replace(g.sampling, seed=(seed + i) % 2**64)
        else:
            sampling = g.sampling
        out = GenerationRequest.__new__(GenerationRequest)
        out.generation = msgspec.structs.replace(
            g, request_id=f"{index}_{g.request_id}", sampling=sampling
        )
        if self.batch:
            given = self.batch[prompt]
            text, ids = (given, None) if isinstance(given, str) else (None, given)
            out.generation.prompt, out.generation.prompt_token_ids = text, ids
        out.batch = ()
        out.stream, out.include_usage, out.echo = self.stream, self.include_usage, self.echo
        out.session_id, out._priority, out.n = self.session_id, self._priority, 1
        out.return_token_ids, out.continuous_usage = self.return_token_ids, self.continuous_usage
        out.hide_reasoning, out.echo_prompt = self.hide_reasoning, self.echo_prompt
        out.resumable, out.objective = self.resumable, self.objective
        out.unknown_fields = self.unknown_fields  # (choice 0's job names them: its headers)
        return out

    @property
    def choices(self) -> int:
        """The answer's choices: n, of each prompt of a batch."""
        return self.n * (len(self.batch) or 1)

    @property
    def model(self) -> str:
        return self.generation.model

    @model.setter
    def model(self, model: str) -> None:  # a fallback serves it
        self.generation.model = model

    @property
    def lora(self) -> str:
        return self.generation.lora

    @lora.setter
    def lora(self, lora: str) -> None:  # the request named an adapter as its model
        self.generation.lora = lora

    @property
    def served_model(self) -> str:
        """The model its responses name: the adapter when it asked for one (as vLLM does)."""
        return self.generation.lora or self.generation.model

    @property
    def priority(self) -> int | None:
        return self._priority

    @priority.setter
    def priority(self, priority: int | None) -> None:
        self._priority = priority
        self.generation.priority = priority or 0


@dataclass(slots=True)
class Delta:
    """What one request gained in one engine step (see engine.proto `Delta`)."""

    token_ids: list[int]
    text: str
    finish: Finish = Finish.NONE
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    logprobs: list[Logprobs] | None = None  # one per token id, when asked for
    # On the last delta of a generation a stop string ended: that string.
    stop_sequence: str = ""
    parsed: bytes = b""  # shardgate/v1/parsed.py `Parsed` (msgpack): a parsed chat answer's
    # With prompt logprobs asked for, on the first delta: one per prompt token.
    prompt_logprobs: list[Logprobs] | None = None


def keepalive() -> Delta:
    """An empty delta: the request is alive but waiting (queued or preempted)."""
    return Delta([], "")


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class GatewayError(Exception):
    """An error with an HTTP status, an OpenAI error type and the request field at fault.

    Each API edge maps it: HTTP status + OpenAI error JSON, or a gRPC status code.
    """

    status = 500
    type = "internal_error"
    # For refusals: why, as a closed metrics label (observability.labels.RejectReason).
    reason = ""

    def __init__(
        self,
        message: str,
        param: str | None = None,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        # Extra response headers (rate-limit values, retry-after).
        self.headers = headers


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"


class Unauthorized(GatewayError):
    status = 401
    type = "authentication_error"


class Forbidden(GatewayError):
    status = 403
    type = "permission_error"


class ModelNotFound(GatewayError):
    status = 404
    type = "not_found_error"


class PayloadTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"


class RateLimited(GatewayError):
    status = 429
    type = "rate_limit_error"


class Unavailable(GatewayError):
    status = 503
    type = "service_unavailable"


class GatewayTimeout(GatewayError):
    status = 504
    type = "timeout"


class UpstreamError(GatewayError):
    status = 502
    type = "upstream_error"
