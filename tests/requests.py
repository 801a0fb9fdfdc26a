"""Building a sidecar's EngineRequest in tests: its Generation's fields by keyword."""

from __future__ import annotations

from typing import Any

from shardgate.v1.params import Generation

from engine_sidecar.backend import EngineRequest


def engine_request(
    key: int, resume_token_ids: tuple[int, ...] = (), **fields: Any
) -> EngineRequest:
    return EngineRequest(key, Generation(**fields), tuple(resume_token_ids))
