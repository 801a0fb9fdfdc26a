"""Exceptions from vLLM's generate() -> the final ERROR delta of a request."""

from __future__ import annotations

from vllm.exceptions import VLLMClientError, VLLMValidationError
from vllm.v1.engine.exceptions import EngineDeadError

from engine_sidecar.backend import EngineDelta, ErrorCode
from engine_sidecar.backends.common.usage import Usage


def error_delta(usage: Usage, e: Exception) -> EngineDelta:
    if isinstance(e, EngineDeadError):
        return usage.error(ErrorCode.UNAVAILABLE, "the vLLM engine died")
    if isinstance(e, VLLMValidationError):
        return usage.error(ErrorCode.INVALID_ARGUMENT, str(e), e.parameter or "")
    if isinstance(e, VLLMClientError | ValueError):
        return usage.error(ErrorCode.INVALID_ARGUMENT, str(e))
    cause = e.__cause__ or e
    return usage.error(ErrorCode.INTERNAL, f"vLLM: {type(cause).__name__}: {cause}")
