"""LoRA adapters loaded and unloaded at run time (vLLM's /v1/load_lora_adapter and
/v1/unload_lora_adapter), with the running requests of each.

Unloading follows `vllm serve`: the name is forgotten at once (new requests naming it are
refused) and requests already running on the adapter finish with it. The engine is told to
remove the adapter when none is running on it; otherwise it stays in the engine's LRU cache
until another adapter needs its slot (where vLLM's own unload leaves every adapter). Removing it
under running requests would not stop them either (vLLM's workers load the adapter a scheduled
request names again, from its path), but would cost that load, and fail if the path is gone.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from vllm.lora.request import LoRARequest

from engine_sidecar.backend import ErrorCode, RequestError
from engine_sidecar.backends.vllm.config import VllmConfig
from engine_sidecar.backends.vllm.sampling import LoraRequests

log = logging.getLogger(__name__)


class Adapters:
    def __init__(self, config: VllmConfig) -> None:
        self.requests = LoraRequests(config.loras)
        self.enabled = config.lora_enabled
        self._running: Counter[int] = Counter()  # lora_int_id -> requests running on it

    def names(self) -> frozenset[str]:
        return self.requests.names()

    def acquire(self, name: str) -> LoRARequest | None:
        """The adapter a request starting now runs on (None: the base model)."""
        request = self.requests.get(name)
        if request is not None:
            self._running[request.lora_int_id] += 1
        return request

    def release(self, request: LoRARequest | None) -> None:
        if request is not None:
            self._running[request.lora_int_id] -= 1
            if self._running[request.lora_int_id] <= 0:
                del self._running[request.lora_int_id]

    async def load(self, llm: Any, name: str, path: str) -> None:
        if not self.enabled:
            raise RequestError(
                ErrorCode.INVALID_ARGUMENT,
                "LoRA is not enabled for this engine: set vllm.enable_lora in the sidecar's "
                "config to load adapters at run time.",
                "lora_name",
            )
        request = self.requests.new(name, path)
        try:
            await llm.add_lora(request)
        except Exception as e:
            text = str(e)
            if "No adapter found" in text:
                message = f"Loading lora {name} failed: No adapter found for {path}"
                raise RequestError(ErrorCode.NOT_FOUND, message, "lora_path") from None
            if bool(getattr(llm, "errored", False)):
                raise RequestError(ErrorCode.UNAVAILABLE, "the vLLM engine died") from None
            message = f"Loading lora {name} failed: {text or type(e).__name__}"
            raise RequestError(ErrorCode.INVALID_ARGUMENT, message, "lora_path") from None
        self.requests.add(request)
        log.info("loaded LoRA adapter %s (id %d) from %s", name, request.lora_int_id, path)

    async def unload(self, llm: Any, name: str) -> None:
        request = self.requests.remove(name)
        if request is None:
            message = f"The lora adapter '{name}' cannot be found."
            raise RequestError(ErrorCode.NOT_FOUND, message, "lora_name")
        running = self._running.get(request.lora_int_id, 0)
        log.info("unloaded LoRA adapter %s (%d requests still running on it)", name, running)
        if running:
            return
        try:
            await llm.remove_lora(request.lora_int_id)
        except Exception as e:  # forgotten already: the engine's LRU cache evicts it in time
            log.warning("vLLM did not remove LoRA adapter %s: %s", name, e)
