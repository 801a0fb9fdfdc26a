"""The sim backend: a deterministic CPU model of a vLLM-like engine (see DESIGN.md)."""

from engine_sidecar.backends.sim.config import SimConfig, SimFaults
from engine_sidecar.backends.sim.engine import SimBackend

__all__ = ["SimBackend", "SimConfig", "SimFaults"]
