"""LoRA adapters loaded and unloaded on one sidecar over its Engine service (a unary call with a
deadline; the sidecar then announces what it serves again, on its link)."""

from __future__ import annotations

import grpc
from shardgate.v1 import engine_pb2 as pb
from shardgate.v1 import engine_pb2_grpc as pb_grpc

from gateway.config.schema import LinkTls
from gateway.types import GatewayError, InvalidRequest, ModelNotFound, Unavailable
from gateway.upstream import credentials
from gateway.upstream.grpc_link import CHANNEL_OPTIONS


def _error(e: grpc.aio.AioRpcError, sidecar: str) -> GatewayError:
    code, message = e.code(), e.details() or ""
    field = dict(e.trailing_metadata() or ()).get("field") or None
    field = str(field) if field else None
    if code is grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidRequest(message, field)
    if code is grpc.StatusCode.NOT_FOUND:
        return ModelNotFound(message, field)
    if code is grpc.StatusCode.UNIMPLEMENTED:
        return InvalidRequest(f"Replica {sidecar}: {message}.", "lora_name")
    return Unavailable(
        f"Replica {sidecar} could not change its LoRA adapters: {message or code.name}."
    )


async def load(
    sidecar: str, address: str, name: str, path: str, timeout_s: float, tls: LinkTls | None
) -> None:
    request = pb.LoadLoraRequest(name=name, path=path)
    async with credentials.channel(address, tls, CHANNEL_OPTIONS) as channel:
        try:
            await pb_grpc.EngineStub(channel).LoadLora(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as e:
            raise _error(e, sidecar) from None


async def unload(
    sidecar: str, address: str, name: str, timeout_s: float, tls: LinkTls | None
) -> None:
    request = pb.UnloadLoraRequest(name=name)
    async with credentials.channel(address, tls, CHANNEL_OPTIONS) as channel:
        try:
            await pb_grpc.EngineStub(channel).UnloadLora(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as e:
            raise _error(e, sidecar) from None
