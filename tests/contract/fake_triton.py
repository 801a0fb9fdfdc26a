"""A small KServe v2 gRPC server built from tritonclient's own service definitions.

It behaves like Triton serving decoupled streaming LLM models, one per convention:
- `llm-vllm` (Triton's vLLM backend): `text_input` + `sampling_parameters` JSON -> one
  `text_output` word per response, `num_output_tokens`, `finish_reason`; the final flag comes
  in an extra empty response.
- `llm-trtllm` (TensorRT-LLM): `input_ids` + `request_output_len` -> one `output_ids` token
  per response, the final flag on the last one.
Tokens are a hash of the whole context, so a request resumed from prompt + generated tokens
continues exactly. `slots` requests run at once; the rest wait in Triton's priority order
(level 1 first, 0 = the lowest level). A request whose id contains "fail" gets an error after
its first token. Cancelling a stream cancels its requests (recorded in `cancelled`).
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import itertools
import json
import struct
from collections.abc import AsyncIterator
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

VLLM_MODEL = "llm-vllm"
TRTLLM_MODEL = "llm-trtllm"
# Some words have a character of two bytes, which a byte-level tokenizer splits over two tokens.
WORDS = ("alpha", "bravo", "café", "delta", "echo", "gamma", "kilo", "lima", "nova", "oscar")
WORDS += ("señor", "tango", "crème")
EOS_EVERY = 64


def _hash(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _param(request: Any, name: str) -> Any:
    return request.parameters.get(name)


def _inputs(request: Any) -> dict[str, Any]:
    return {t.name: t.contents for t in request.inputs}


class Slots:
    """`n` requests at once; waiting ones in (level, arrival) order, like Triton's scheduler."""

    def __init__(self, n: int, levels: int) -> None:
        self.free = n
        self.levels = levels
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()
        self.order: list[str] = []  # request ids in the order they started

    async def acquire(self, level: int, request_id: str) -> None:
        level = level or self.levels or 1
        if self.free and not self._heap:
            self.free -= 1
        else:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            heapq.heappush(self._heap, (level, next(self._arrivals), fut))
            await fut  # cancelled: release() skips it
        self.order.append(request_id)

    def release(self) -> None:
        while self._heap:
            _, _, fut = heapq.heappop(self._heap)
            if not fut.done():
                fut.set_result(None)
                return
        self.free += 1


class FakeTriton(pb_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    def __init__(self, *, slots: int = 4, priority_levels: int = 4, token_delay_s: float = 0.002):
        self.ready = True
        self.token_delay_s = token_delay_s
        self.slots = Slots(slots, priority_levels)
        self.received: list[Any] = []
        self.cancelled: list[str] = []
        self.success = 0
        self.fail = 0
        self.server: grpc.aio.Server | None = None
        self.port = 0

    # --- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        self.server = grpc.aio.server()
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(0.5)

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    # --- health and statistics ------------------------------------------------------------
    async def ServerLive(self, request: Any, context: Any) -> Any:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return pb.ServerReadyResponse(ready=self.ready)

    async def ModelReady(self, request: Any, context: Any) -> Any:
        return pb.ModelReadyResponse(
            ready=self.ready and request.name in (VLLM_MODEL, TRTLLM_MODEL)
        )

    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        reply = pb.ModelStatisticsResponse()
        stats = reply.model_stats.add(name=request.name or VLLM_MODEL, version="1")
        stats.inference_stats.success.count = self.success
        stats.inference_stats.fail.count = self.fail
        return reply

    # --- generation -----------------------------------------------------------------------
    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[Any], context: Any
    ) -> AsyncIterator[Any]:
        out: asyncio.Queue[Any] = asyncio.Queue()
        tasks: list[asyncio.Task[None]] = []
        ids: list[str] = []

        async def read() -> None:
            async for request in request_iterator:
                self.received.append(request)
                ids.append(request.id)
                tasks.append(asyncio.create_task(self._serve(request, out)))

        reader = asyncio.create_task(read())
        completed = False
        try:
            while True:
                if reader.done() and all(t.done() for t in tasks) and out.empty():
                    completed = True
                    return
                try:
                    item = await asyncio.wait_for(out.get(), 0.05)
                except TimeoutError:
                    continue
                yield item
        finally:
            if not completed:  # the client cancelled the stream (or went away)
                self.cancelled.extend(ids)
            for t in [reader, *tasks]:
                t.cancel()

    async def _serve(self, request: Any, out: asyncio.Queue[Any]) -> None:
        final_param = _param(request, "triton_enable_empty_final_response")
        flagged = final_param is not None and final_param.bool_param
        priority = _param(request, "priority")
        await self.slots.acquire(priority.uint64_param if priority else 0, request.id)
        try:
            if request.model_name == VLLM_MODEL:
                gen = self._vllm(request)
            elif request.model_name == TRTLLM_MODEL:
                gen = self._trtllm(request)
            else:
                await out.put(pb.ModelStreamInferResponse(error_message="unknown model"))
                return
            async for response, final in gen:
                if isinstance(response, _Error):
                    await out.put(response.message)
                    return
                if flagged:
                    response.parameters["triton_final_response"].bool_param = final
                if final or response.outputs:
                    await out.put(pb.ModelStreamInferResponse(infer_response=response))
                await asyncio.sleep(self.token_delay_s)
            self.success += 1
        finally:
            self.slots.release()

    def _response(self, request: Any) -> Any:
        return pb.ModelInferResponse(model_name=request.model_name, id=request.id)

    async def _vllm(self, request: Any) -> AsyncIterator[tuple[Any, bool]]:
        inputs = _inputs(request)
        text = inputs["text_input"].bytes_contents[0].decode()
        params = json.loads(inputs["sampling_parameters"].bytes_contents[0])
        max_tokens, ignore_eos = int(params["max_tokens"]), bool(params.get("ignore_eos"))
        context = text
        for n in range(1, max_tokens + 1):
            h = _hash(context.encode())
            if not ignore_eos and n > 1 and h % EOS_EVERY == 0:
                yield self._text_response(request, "", 0, "stop"), False
                break
            word = " " + WORDS[h % len(WORDS)]
            context += word
            if "fail" in request.id and n == 2:
                self.fail += 1
                yield _Error("fake: injected failure"), False
                return
            reason = "length" if n == max_tokens else "None"
            yield self._text_response(request, word, 1, reason), False
        yield self._response(request), True  # the empty final response

    def _text_response(self, request: Any, text: str, count: int, reason: str) -> Any:
        r = self._response(request)
        outputs = (
            ("text_output", "BYTES", _bytes(text)),
            ("num_output_tokens", "UINT32", struct.pack("<I", count)),
            ("finish_reason", "BYTES", _bytes(reason)),
        )
        for name, datatype, raw in outputs:
            r.outputs.add(name=name, datatype=datatype, shape=[1])
            r.raw_output_contents.append(raw)
        return r

    async def _trtllm(self, request: Any) -> AsyncIterator[tuple[Any, bool]]:
        inputs = _inputs(request)
        context = list(inputs["input_ids"].int_contents)
        max_tokens = inputs["request_output_len"].int_contents[0]
        end_id = inputs["end_id"].int_contents[0] if "end_id" in inputs else -1
        for n in range(1, max_tokens + 1):
            h = _hash(struct.pack(f"<{len(context)}i", *context))
            if end_id >= 0 and n > 1 and h % EOS_EVERY == 0:
                yield self._response(request), True
                return
            if "fail" in request.id and n == 2:
                self.fail += 1
                yield _Error("fake: injected failure"), False
                return
            token = 3 + h % 1000
            context.append(token)
            r = self._response(request)
            r.outputs.add(name="output_ids", datatype="INT32", shape=[1, 1, 1])
            r.raw_output_contents.append(struct.pack("<i", token))
            yield r, n == max_tokens


class _Error:
    """A stream-level error in place of a response."""

    def __init__(self, message: str) -> None:
        self.message = pb.ModelStreamInferResponse(error_message=message)


def _bytes(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<I", len(data)) + data
