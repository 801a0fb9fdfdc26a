"""The openai backend: an engine server that speaks the OpenAI API over HTTP (`vllm serve`,
SGLang, any OpenAI-compatible server), in front of which the sidecar runs.

Importing this package imports only its configuration; `engine_sidecar.backends.openai.backend`
imports the rest.
"""

from engine_sidecar.backends.openai.config import OpenAIConfig

__all__ = ["OpenAIConfig"]
