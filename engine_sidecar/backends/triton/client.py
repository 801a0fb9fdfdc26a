"""The connection to one Triton server: readiness and statistics through tritonclient's asyncio
client, and generation streams through the generated KServe v2 stub.

Streams use the stub because only it can set `triton_enable_empty_final_response`, the flag that
makes Triton mark the last response of a decoupled model (tritonclient reserves `triton_*`
parameters). Every call carries a deadline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.grpc.aio import InferenceServerClient

_MAX_MESSAGE = 64 << 20
_OPTIONS = [
    ("grpc.max_send_message_length", _MAX_MESSAGE),
    ("grpc.max_receive_message_length", _MAX_MESSAGE),
]


class TritonClient:
    def __init__(self, url: str, model: str, version: str, rpc_timeout_s: float) -> None:
        self.model = model
        self.version = version
        self._timeout = rpc_timeout_s
        self._admin = InferenceServerClient(url)
        self._channel = grpc.aio.insecure_channel(url, options=_OPTIONS)
        self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)

    def request(self, request_id: str, inputs: list[Any]) -> Any:
        r = service_pb2.ModelInferRequest(
            model_name=self.model, model_version=self.version, id=request_id
        )
        r.inputs.extend(inputs)
        r.parameters["triton_enable_empty_final_response"].bool_param = True
        return r

    def stream(self, request: Any, timeout_s: float) -> Any:
        """Start a ModelStreamInfer call that sends `request` and reads its responses."""

        async def one() -> AsyncIterator[Any]:
            yield request

        return self._stub.ModelStreamInfer(one(), timeout=timeout_s)

    async def ready(self) -> bool:
        """Server and model both ready (any failure, timeouts included, reads as not ready)."""
        try:
            server = await self._admin.is_server_ready(client_timeout=self._timeout)
            if not server:
                return False
            return bool(
                await self._admin.is_model_ready(
                    self.model, self.version, client_timeout=self._timeout
                )
            )
        except Exception:
            return False

    async def statistics(self) -> Any:
        return await self._admin.get_inference_statistics(
            self.model, self.version, client_timeout=self._timeout
        )

    async def close(self) -> None:
        await self._admin.close()
        await self._channel.close()
