"""Exceptions from vLLM's generate() -> the final ERROR delta of a request."""

from __future__ import annotations

from vllm.exceptions import VLLMClientError, VLLMValidationError
from vllm.v1.engine.exceptions import EngineDeadError

from engine_sidecar.backend import EngineDelta, ErrorCode
from engine_sidecar.backends.common.usage import Usage


def error_delta(usage: Usage, e: Exception, field: str = "") -> EngineDelta:
    """`field`: the request field a refusal without its own names (a structured output's
    schema that vLLM cannot compile is a refusal of the field it came in)."""
    if isinstance(e, EngineDeadError):
        return usage.error(ErrorCode.UNAVAILABLE, "the vLLM engine died")
    if isinstance(e, VLLMValidationError):
        return usage.error(ErrorCode.INVALID_ARGUMENT, str(e), e.parameter or field)
    if isinstance(e, VLLMClientError | ValueError):
        return usage.error(ErrorCode.INVALID_ARGUMENT, str(e), field)
    cause = e.__cause__ or e
    return usage.error(ErrorCode.INTERNAL, f"vLLM: {type(cause).__name__}: {cause}")
