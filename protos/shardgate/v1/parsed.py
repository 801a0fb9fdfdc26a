"""What an engine parsed from a chat request's output (tool calls, reasoning), defined once.

A sidecar that parses its output (vLLM's tool and reasoning parsers) sets `Delta.parsed` on
every delta of such a request: the msgpack bytes of a `Parsed`, what the step added to the
answer's content, reasoning and tool calls (vLLM's `DeltaMessage`). A request asked for whole
(`Generation.parse_whole`) has it on its last delta only, holding the whole answer. The delta's
`text` stays the model's raw text, for the APIs that do not parse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec


class ToolCallDelta(msgspec.Struct, frozen=True, array_like=True, gc=False, kw_only=True):
    """A piece of the tool call at `index`: its first piece has the id and the name, the
    following ones more of the arguments (JSON text)."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str | None = None


class Parsed(msgspec.Struct, frozen=True, array_like=True, gc=False, kw_only=True):
    content: str | None = None
    reasoning: str | None = None
    tool_calls: tuple[ToolCallDelta, ...] = ()


EMPTY: Final = Parsed()
_ENCODE = msgspec.msgpack.Encoder()
_DECODE = msgspec.msgpack.Decoder(Parsed)


def encode(p: Parsed) -> bytes:
    return _ENCODE.encode(p)


def decode(data: bytes) -> Parsed:
    """Raises msgspec.ValidationError / DecodeError on bytes that are not a Parsed."""
    return _DECODE.decode(data)


def _join(a: str | None, b: str | None) -> str | None:
    if a is None:
        return b
    return a if b is None else a + b


def merge(parts: Sequence[Parsed]) -> Parsed:
    """One Parsed that says what `parts` say in turn (a lagging client's deltas, merged): texts
    joined, a call's argument pieces joined onto the piece before them."""
    if len(parts) == 1:
        return parts[0]
    content: str | None = None
    reasoning: str | None = None
    calls: list[ToolCallDelta] = []
    for p in parts:
        content = _join(content, p.content)
        reasoning = _join(reasoning, p.reasoning)
        for c in p.tool_calls:
            last = calls[-1] if calls else None
            if last is not None and last.index == c.index and c.id is None and c.name is None:
                calls[-1] = msgspec.structs.replace(
                    last, arguments=_join(last.arguments, c.arguments)
                )
            else:
                calls.append(c)
    return Parsed(content=content, reasoning=reasoning, tool_calls=tuple(calls))
