"""vLLM's /tokenize and /detokenize, asked of one sidecar of the model over its Engine service
(a unary call with a deadline; the link carries generations only)."""

from __future__ import annotations

import grpc
from shardgate.v1 import engine_pb2 as pb
from shardgate.v1 import engine_pb2_grpc as pb_grpc
from shardgate.v1 import params

from gateway.config.schema import LinkTls
from gateway.types import GatewayError, InvalidRequest, ModelNotFound, Unavailable
from gateway.upstream import credentials
from gateway.upstream.grpc_link import CHANNEL_OPTIONS


def _error(e: grpc.aio.AioRpcError, model: str, what: str) -> GatewayError:
    code, message = e.code(), e.details() or ""
    if code is grpc.StatusCode.INVALID_ARGUMENT:
        field = dict(e.trailing_metadata() or ()).get("field") or None
        return InvalidRequest(message, str(field) if field else None)
    if code is grpc.StatusCode.NOT_FOUND:
        return ModelNotFound(message, "model")
    if code is grpc.StatusCode.UNIMPLEMENTED:
        return InvalidRequest(f"model {model}: {what} is not supported by its engine.", "model")
    return Unavailable(f"The engine could not {what}: {message or code.name}.")


async def tokenize(
    address: str, generation: params.Generation, timeout_s: float, tls: LinkTls | None = None
) -> tuple[list[int], int]:
    """(the prompt's token ids, the model's max_model_len)."""
    request = pb.TokenizeRequest(generation=params.encode(generation))
    async with credentials.channel(address, tls, CHANNEL_OPTIONS) as channel:
        try:
            reply = await pb_grpc.EngineStub(channel).Tokenize(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as e:
            raise _error(e, generation.model, "tokenize") from None
    return list(reply.tokens), reply.max_model_len


async def detokenize(
    address: str, model: str, tokens: list[int], timeout_s: float, tls: LinkTls | None = None
) -> str:
    request = pb.DetokenizeRequest(model=model, tokens=tokens)
    async with credentials.channel(address, tls, CHANNEL_OPTIONS) as channel:
        try:
            reply = await pb_grpc.EngineStub(channel).Detokenize(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as e:
            raise _error(e, model, "detokenize") from None
    return str(reply.prompt)
