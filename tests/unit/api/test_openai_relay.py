"""The streaming relay hands tokens to the direct sink only once the response's head is out:
an SSE response's head leaves with its first write."""

from __future__ import annotations

from typing import Any

from gateway.api.openai.answer import Answer
from gateway.api.openai.direct import DirectSink
from gateway.api.openai.encode import ChunkEncoder
from gateway.api.openai.relay import Relay
from gateway.api.openai.serving import OpenAIServing, Tally
from gateway.runtime.stream import ResponseStream
from gateway.types import Delta, GenerationRequest, Sampling


class Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data: bytes) -> None:
        self.written.append(data)


class Response:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    async def write(self, data: bytes) -> None:
        self.writes.append(data)


class Gen:
    def __init__(self, batches: list[list[Delta]]) -> None:
        self.out = ResponseStream(64)
        self._batches = batches
        self.sink_at_take: list[Any] = []

    async def take(self) -> list[Delta]:
        self.sink_at_take.append(self.out.sink)
        return self._batches.pop(0) if self._batches else []


async def test_the_sink_waits_for_the_first_write() -> None:
    enc = ChunkEncoder("id", "m", 0, "completion")  # no role chunk: nothing to write up front
    sink = DirectSink(Transport(), True, enc, Tally())  # type: ignore[arg-type]
    gen = Gen([[Delta([7], "a")]])
    resp = Response()
    first = [Delta([], "", prompt_tokens=5)]  # the prompt's count, no text yet
    req = GenerationRequest("id", "m", Sampling(max_tokens=4))
    relay = Relay(req, enc, Tally(), Answer(None), None)
    await OpenAIServing._relay(resp, gen, relay, first, sink)  # type: ignore[arg-type]
    # Nothing written after the first batch: the sink was not handed out then.
    assert gen.sink_at_take == [None, sink]
    assert len(resp.writes) == 1 and b'"text":"a"' in resp.writes[0]
