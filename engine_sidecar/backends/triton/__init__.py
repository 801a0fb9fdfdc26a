"""The Triton backend: a Triton Inference Server LLM model over KServe v2 gRPC streaming.

Importing this package does not import tritonclient; `engine_sidecar.backends.triton.backend`
does.
"""

from engine_sidecar.backends.triton.config import TritonConfig

__all__ = ["TritonConfig"]
