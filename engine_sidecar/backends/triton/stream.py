"""One request on Triton: a ModelStreamInfer call read response by response, each read with a
deadline, turned into EngineDeltas. Cancelling the task cancels the call, which cancels the
request on Triton."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc

from engine_sidecar.backend import EngineDelta, ErrorCode, Finish
from engine_sidecar.backends.common.usage import Usage
from engine_sidecar.backends.triton.client import TritonClient
from engine_sidecar.backends.triton.config import TritonConfig
from engine_sidecar.backends.triton.job import Job, Reader

FINISH = {"stop": Finish.STOP, "length": Finish.LENGTH, "abort": Finish.ABORT}
_UNAVAILABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.CANCELLED,
}
_BAD = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND}


def is_final(response: Any) -> bool:
    params = response.parameters
    return "triton_final_response" in params and params["triton_final_response"].bool_param


def rpc_error_code(e: grpc.aio.AioRpcError) -> ErrorCode:
    code = e.code()
    if code in _UNAVAILABLE:
        return ErrorCode.UNAVAILABLE
    return ErrorCode.INVALID_ARGUMENT if code in _BAD else ErrorCode.INTERNAL


class RequestStream:
    """Runs one job; every delta goes to `emit` (the backend's step batcher)."""

    def __init__(
        self,
        client: TritonClient,
        config: TritonConfig,
        job: Job,
        reader: Reader,
        emit: Callable[[EngineDelta], None],
    ) -> None:
        self._client = client
        self._config = config
        self._job = job
        self._reader = reader
        self._emit = emit
        self.usage = Usage(job.request.key, job.prompt_tokens, job.resumed)
        self.generated = 0  # tokens this run produced
        self._reason: str | None = None  # the last finish reason a response named
        self.on_tokens: Callable[[int], None] = lambda n: None

    async def run(self, request: Any) -> None:
        c = self._config
        call = self._client.stream(request, c.request_timeout_s)
        try:
            await self._read(call)
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            self._emit(self.usage.error(ErrorCode.UNAVAILABLE, "Triton stopped responding"))
        except grpc.aio.AioRpcError as e:
            self._emit(self.usage.error(rpc_error_code(e), f"Triton: {e.details()}"))
        except Exception as e:
            self._emit(self.usage.error(ErrorCode.INTERNAL, f"Triton: {type(e).__name__}: {e}"))
        finally:
            call.cancel()

    async def _read(self, call: Any) -> None:
        c = self._config
        timeout = c.first_response_timeout_s
        while True:
            async with asyncio.timeout(timeout):
                message = await call.read()
            timeout = c.response_timeout_s
            if message is grpc.aio.EOF:
                message = "Triton ended the stream before the request finished"
                self._emit(self.usage.error(ErrorCode.UNAVAILABLE, message))
                return
            if message.error_message:
                self._emit(self.usage.error(ErrorCode.INTERNAL, message.error_message))
                return
            if self._step(message.infer_response):
                return

    def _step(self, response: Any) -> bool:
        """Emit what one response brings; True when it was the last."""
        step = self._reader.read(response) if response.outputs else None
        final = is_final(response)
        usage = self.usage
        if step is not None:
            if step.prompt_tokens is not None and not usage.sent_first and not usage.prompt_tokens:
                usage.prompt_tokens = max(step.prompt_tokens - self._job.resumed, 0)
            self.generated += step.count
            self.on_tokens(step.count)
            if step.finish_reason in FINISH:
                self._reason = step.finish_reason
            finish = self._finish() if final else Finish.NONE
            if step.token_ids or step.text or final:
                self._emit(self._delta(step.token_ids, step.text, finish))
            return final
        if final:
            self._emit(self._final())
        return final

    def _finish(self) -> Finish:
        if self._reason is not None:
            return FINISH[self._reason]
        return Finish.LENGTH if self.generated >= self._job.max_tokens else Finish.STOP

    def _delta(self, ids: list[int], text: str, finish: Finish) -> EngineDelta:
        total = self._job.resumed + self.generated
        done = None if finish is Finish.NONE else total
        return self.usage.delta(ids, text, finish, completion_tokens=done)

    def _final(self) -> EngineDelta:
        return self._delta([], "", self._finish())
