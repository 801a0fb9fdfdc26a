"""Which API's error shape a route answers in: Anthropic's under /v1/messages, OpenAI's
everywhere else (the API edges' own encoders; this only picks one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from gateway.api.anthropic import errors as anthropic
from gateway.api.openai import encode as openai
from gateway.types import GatewayError

__all__ = ["ANTHROPIC_PATH", "ErrorShape", "error_shape"]

# An error as an HTTP status and a JSON body.
ErrorShape = Callable[[GatewayError], tuple[int, bytes]]

ANTHROPIC_PATH: Final = "/v1/messages"


def _openai(err: GatewayError) -> tuple[int, bytes]:
    return err.status, openai.error_body(err)


def error_shape(path: str) -> ErrorShape:
    """The shape of the errors answered to a request for `path`."""
    if path == ANTHROPIC_PATH or path.startswith(ANTHROPIC_PATH + "/"):
        return anthropic.error_body
    return _openai
