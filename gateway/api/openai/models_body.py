"""The bodies of GET /v1/models and GET /v1/models/{model}, as `vllm serve` answers them."""

from __future__ import annotations

from typing import Any, Final

import msgspec

OWNED_BY: Final = "shardgate"

_encode: Final = msgspec.json.Encoder().encode


def _model(model_id: str, max_model_len: int, parent: str | None, created: int) -> dict[str, Any]:
    return {
        "id": model_id,
        "object": "model",
        "created": created,
        "owned_by": OWNED_BY,
        "parent": parent,  # a LoRA adapter's base model (vLLM's field); null for a model
        "max_model_len": max_model_len,
    }


# (model id, max_model_len, parent): one entry of GET /v1/models.
ModelEntry = tuple[str, int, str | None]


def encode_models(models: list[ModelEntry], created: int) -> bytes:
    """The body of GET /v1/models."""
    return _encode({"object": "list", "data": [_model(*m, created) for m in models]})


def encode_model(model: ModelEntry, created: int) -> bytes:
    """The body of GET /v1/models/{model}."""
    return _encode(_model(*model, created))
