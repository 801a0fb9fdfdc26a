"""The Engine service's LoadLora and UnloadLora: vLLM's checks of the name, then the backend.

The checks are `vllm serve`'s (its /v1/load_lora_adapter and /v1/unload_lora_adapter): both a
name and a path; not a served model's name; not one already loaded; unloading an unknown name is
NOT_FOUND. A backend that cannot load adapters at run time is refused with UNIMPLEMENTED.
"""

from __future__ import annotations

from typing import cast

from engine_sidecar.backend import Backend, ErrorCode, LoadsLoras, RequestError


class Unsupported(Exception):
    """The backend loads no adapters at run time."""


def loads_loras(backend: Backend) -> LoadsLoras:
    if callable(getattr(backend, "load_lora", None)) and callable(
        getattr(backend, "unload_lora", None)
    ):
        return cast(LoadsLoras, backend)
    raise Unsupported(
        f"the {backend.info().backend} engine does not load LoRA adapters at run time"
    )


def _loaded(backend: Backend) -> set[str]:
    return {lora for card in backend.info().models for lora in card.loras}


async def load(backend: Backend, name: str, path: str) -> None:
    engine = loads_loras(backend)
    if not name or not path:
        message = "Both 'lora_name' and 'lora_path' must be provided."
        raise RequestError(
            ErrorCode.INVALID_ARGUMENT, message, "lora_name" if not name else "lora_path"
        )
    if name in {card.name for card in backend.info().models}:
        message = f"The lora adapter '{name}' conflicts with a served base model."
        raise RequestError(ErrorCode.INVALID_ARGUMENT, message, "lora_name")
    if name in _loaded(backend):
        message = f"The lora adapter '{name}' has already been loaded."
        raise RequestError(ErrorCode.INVALID_ARGUMENT, message, "lora_name")
    await engine.load_lora(name, path)


async def unload(backend: Backend, name: str) -> None:
    engine = loads_loras(backend)
    if not name:
        message = "'lora_name' needs to be provided to unload a LoRA adapter."
        raise RequestError(ErrorCode.INVALID_ARGUMENT, message, "lora_name")
    if name not in _loaded(backend):
        message = f"The lora adapter '{name}' cannot be found."
        raise RequestError(ErrorCode.NOT_FOUND, message, "lora_name")
    await engine.unload_lora(name)
