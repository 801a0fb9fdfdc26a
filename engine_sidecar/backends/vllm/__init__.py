"""The vLLM backend: an in-process AsyncLLM behind the Backend protocol.

Importing this package does not import vLLM; `engine_sidecar.backends.vllm.backend` does.
"""

from engine_sidecar.backends.vllm.config import VllmConfig

__all__ = ["VllmConfig"]
