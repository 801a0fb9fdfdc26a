"""vLLM RequestOutput (DELTA kind) -> EngineDelta."""

from __future__ import annotations

from typing import Any

from engine_sidecar.backend import EngineDelta, Finish
from engine_sidecar.backends.common.usage import Usage

FINISH = {
    "stop": Finish.STOP,
    "length": Finish.LENGTH,
    "abort": Finish.ABORT,
    "error": Finish.ERROR,
}


def to_delta(usage: Usage, out: Any) -> EngineDelta:
    """One step's output of one request (n=1: a single completion)."""
    c = out.outputs[0]
    finish = FINISH.get(c.finish_reason, Finish.STOP) if out.finished else Finish.NONE
    return usage.delta(
        list(c.token_ids),
        c.text,
        finish,
        cached_tokens=out.num_cached_tokens or 0,
    )
