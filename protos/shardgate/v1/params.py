"""A request's engine parameters, defined once.

The gateway's edges decode a request into a `Generation`; it travels unchanged to the sidecar's
backend: as itself inside the TCP link's msgpack frames (shardgate/v1/wire.py), as its msgpack
bytes inside engine.proto's `SubmitRequest.generation` on the gRPC link. Nothing converts it
field by field on the way, so a field added here reaches every engine (or is refused by name
where an engine cannot honour it).

`PROTOCOL_VERSION` is the link's: the gateway and the sidecar each say theirs when the link
starts (the TCP link's magic, the gRPC Link call's metadata, the sidecar's `Info`), and refuse a
peer that speaks another, with an error that says so, instead of misreading its messages.
"""

from __future__ import annotations

import enum
from typing import Final

import msgspec

PROTOCOL_VERSION: Final = 5
# 3: logprobs, tools, Delta.parsed; 4: chat template controls (Generation.template,
# Generation.add_special_tokens); 5: prompt logprobs (Delta.prompt_logprobs, Logprobs.ranks),
# prompt truncation
# gRPC metadata key of the gateway's protocol version on the Link call.
PROTOCOL_METADATA: Final = "shardgate-link-protocol"


class Finish(enum.IntEnum):
    """Why a request ended; the values are engine.proto's `Finish`."""

    NONE = 0
    STOP = 1
    LENGTH = 2
    ABORT = 3
    ERROR = 4


class ToolCall(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A function call an assistant made: in a conversation's messages, and in an answer."""

    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it


class Message(msgspec.Struct, frozen=True, array_like=True, gc=False):
    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant's calls
    tool_call_id: str | None = None  # a tool message: the call it answers


class Tools(msgspec.Struct, frozen=True, array_like=True, gc=False, kw_only=True):
    """A chat request's tools and its `tool_choice`: "none", "auto", "required", or "function"
    (the one named in `function`). The chat template renders the tools; the engine parses the
    calls from the output (tools.py)."""

    tools: str  # the request's `tools` array, as JSON text
    choice: str = "auto"
    function: str = ""
    parallel_tool_calls: bool | None = None


class Structured(msgspec.Struct, frozen=True, array_like=True, gc=False, kw_only=True):
    """Structured outputs (vLLM's StructuredOutputsParams): exactly one kind is set. `field` is
    the request field it came from, named in the engine's errors (a schema it cannot compile)."""

    field: str
    json: str | None = None  # a JSON schema, as JSON text
    json_object: bool | None = None
    regex: str | None = None
    choice: tuple[str, ...] | None = None
    grammar: str | None = None


class Template(msgspec.Struct, frozen=True, array_like=True, gc=False, kw_only=True):
    """A chat request's controls of its chat template, as vLLM's chat API names them; each at
    its default asks for nothing. `kwargs` and `documents` are JSON text ("": none)."""

    chat_template: str | None = None  # a Jinja template for this request (trusted sidecars)
    kwargs: str = ""  # chat_template_kwargs: an object of the template's variables
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    documents: str = ""  # an array of documents, for templates that take them (RAG)


_TEMPLATE_DEFAULTS: Final = Template()


class Sampling(msgspec.Struct, frozen=True, array_like=True, gc=False, kw_only=True):
    """vLLM's sampling parameters, named as its OpenAI server names them. Every engine honours
    the first seven; each of the others, when it differs from its default (the field is asked
    for), needs an engine that announces it among its capabilities (`OPTIONAL`)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_p: float = 0.0
    logit_bias: dict[int, float] | None = None  # token id -> bias added to its logit
    stop_token_ids: tuple[int, ...] = ()
    include_stop_str_in_output: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    bad_words: tuple[str, ...] = ()
    allowed_token_ids: tuple[int, ...] | None = None
    structured: Structured | None = None
    # Logprobs of each generated token and of this many top alternatives (vLLM's
    # SamplingParams.logprobs: chat's top_logprobs, completions' logprobs); None: none.
    logprobs: int | None = None
    # Logprobs of each prompt token and of this many top alternatives (-1: all; 0: the token's
    # own), given once, with the first delta (vLLM's SamplingParams.prompt_logprobs).
    prompt_logprobs: int | None = None
    # The logprobs of these tokens (and of the sampled one, first) at each generated position,
    # instead of the top ones: vLLM's logprob_token_ids (`logprobs` still says they are asked).
    logprob_token_ids: tuple[int, ...] | None = None
    # Keep this many of the prompt's tokens (-1: the most the model takes, less one for the
    # output), from the `truncation_side` ("left" keeps the last ones, "right" the first; "":
    # the tokenizer's own side), as vLLM's tokenization params do.
    truncate_prompt_tokens: int | None = None
    truncation_side: str = ""


_BASE: Final = frozenset(
    {"max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "ignore_eos"}
)
# The optional sampling fields and their defaults ("not asked for").
OPTIONAL: Final[dict[str, object]] = {
    f.name: f.default for f in msgspec.structs.fields(Sampling) if f.name not in _BASE
}


_FIRST_OPTIONAL: Final = len(msgspec.structs.fields(Sampling)) - len(OPTIONAL)
_DEFAULTS: Final = tuple(OPTIONAL.values())

# Fields with which an engine cannot resume exactly: vLLM applies them to the tokens it
# generated itself, and a resumed run sees the earlier ones as prompt. Such a request is never
# preempted, and moves to another replica only before its first token.
# Structured outputs too: a resumed run would start its grammar again from the first token.
NOT_RESUMABLE: Final = ("presence_penalty", "frequency_penalty", "bad_words", "structured")


def not_resumable(s: Sampling) -> list[str]:
    """The fields of `s` that keep it from resuming exactly (none: it can)."""
    if msgspec.structs.astuple(s)[_FIRST_OPTIONAL:] == _DEFAULTS:
        return []  # (most requests: one comparison)
    return [name for name in NOT_RESUMABLE if getattr(s, name) != OPTIONAL[name]]


def asked(s: Sampling) -> list[str]:
    """The optional sampling fields `s` asks for (those not at their defaults), in order."""
    if msgspec.structs.astuple(s)[_FIRST_OPTIONAL:] == _DEFAULTS:
        return []  # (most requests: one comparison)
    return [name for name, default in OPTIONAL.items() if getattr(s, name) != default]


class Generation(msgspec.Struct, array_like=True, gc=False, kw_only=True):
    """What an engine needs to run a request. Exactly one of prompt / messages /
    prompt_token_ids is set."""

    request_id: str
    model: str
    sampling: Sampling
    prompt: str | None = None
    messages: tuple[Message, ...] | None = None
    prompt_token_ids: tuple[int, ...] | None = None
    priority: int = 0  # higher runs first
    lora: str = ""
    tools: Tools | None = None
    # The answer is wanted whole (not streamed): an engine that parses its output (tool calls,
    # reasoning) parses it once at the end, as vLLM's non-streamed answers are parsed.
    parse_whole: bool = False
    template: Template | None = None  # chat template controls (messages only)
    # Special tokens (BOS) added to the prompt's text; None: the input's default (a prompt:
    # true; messages: false, the chat template writes them).
    add_special_tokens: bool | None = None


# The request fields of the chat template controls (each an engine capability of its own).
TEMPLATE_FIELDS: Final = (
    "chat_template",
    "chat_template_kwargs",
    "add_generation_prompt",
    "continue_final_message",
    "documents",
    "add_special_tokens",
)


def template_asked(g: Generation) -> list[str]:
    """The chat template controls `g` asks for (the request fields' names), in order: each
    needs an engine that announces it among its capabilities."""
    out: list[str] = []
    t = g.template
    if t is not None and t != _TEMPLATE_DEFAULTS:
        if t.chat_template is not None:
            out.append("chat_template")
        if t.kwargs:
            out.append("chat_template_kwargs")
        if not t.add_generation_prompt:
            out.append("add_generation_prompt")
        if t.continue_final_message:
            out.append("continue_final_message")
        if t.documents:
            out.append("documents")
    if g.add_special_tokens is not None:
        out.append("add_special_tokens")
    return out


def tools_not_resumable(t: Tools | None) -> list[str]:
    """["tool_choice"] where the tool choice is a grammar over the output (a named function, or
    "required": structured outputs, see NOT_RESUMABLE); an engine's tool parser itself resumes
    (it is given the text so far again)."""
    return ["tool_choice"] if t is not None and t.choice in ("required", "function") else []


class Logprobs(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One token's logprobs as vLLM gives them: the sampled (or prompt) token first, then the
    requested top ones by rank (a token that is both appears once, first). `tokens` are the
    tokens' texts as vLLM decodes them for logprobs. Travels with the token in its delta."""

    ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    tokens: tuple[str, ...]
    # Each token's rank in the model's distribution (1: the most likely): prompt logprobs
    # only, empty elsewhere. A prompt's first token has neither logprobs nor ranks.
    ranks: tuple[int, ...] = ()


class GenerationView:
    """Read access to the fields of the Generation a type carries (the gateway's request, the
    sidecar's engine request): the definition's own fields, not copies of them."""

    __slots__ = ()
    generation: Generation

    @property
    def request_id(self) -> str:
        return self.generation.request_id

    @property
    def model(self) -> str:
        return self.generation.model

    @property
    def sampling(self) -> Sampling:
        return self.generation.sampling

    @property
    def prompt(self) -> str | None:
        return self.generation.prompt

    @property
    def messages(self) -> tuple[Message, ...] | None:
        return self.generation.messages

    @property
    def prompt_token_ids(self) -> tuple[int, ...] | None:
        return self.generation.prompt_token_ids

    @property
    def lora(self) -> str:
        return self.generation.lora


_ENCODE = msgspec.msgpack.Encoder()
_DECODE = msgspec.msgpack.Decoder(Generation)
_DECODE_LOGPROBS = msgspec.msgpack.Decoder(list[Logprobs])


def encode(g: Generation) -> bytes:
    return _ENCODE.encode(g)


def decode(data: bytes) -> Generation:
    """Raises msgspec.ValidationError / DecodeError on bytes that are not a Generation."""
    return _DECODE.decode(data)


def encode_logprobs(lps: list[Logprobs]) -> bytes:
    """A delta's logprobs as engine.proto's `Delta.logprobs` carries them."""
    return _ENCODE.encode(lps)


def decode_logprobs(data: bytes) -> list[Logprobs]:
    """Raises msgspec.ValidationError / DecodeError on bytes that are not logprobs."""
    return _DECODE_LOGPROBS.decode(data)
