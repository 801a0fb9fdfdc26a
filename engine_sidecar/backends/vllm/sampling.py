"""EngineRequest -> vLLM's SamplingParams, priority and LoRA request."""

from __future__ import annotations

from vllm import SamplingParams
from vllm.lora.request import LoRARequest
from vllm.sampling_params import RequestOutputKind

from engine_sidecar.backend import Sampling


def sampling_params(s: Sampling, max_tokens: int, *, detokenize: bool = True) -> SamplingParams:
    """Streamed as deltas: each output holds only what the step added. Without detokenize,
    outputs carry token ids only, and the caller applies the stop strings to its own text."""
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=s.top_k,
        seed=s.seed,
        stop=(list(s.stop) or None) if detokenize else None,
        ignore_eos=s.ignore_eos,
        detokenize=detokenize,
        output_kind=RequestOutputKind.DELTA,
    )


def engine_priority(priority: int, policy: str) -> int:
    """Our classes run HIGHER first; vLLM runs the LOWER number first. FCFS takes none."""
    return -priority if policy == "priority" else 0


class LoraRequests:
    """One LoRARequest per configured adapter, with stable ids (1, 2, ...)."""

    def __init__(self, loras: dict[str, str]) -> None:
        self._by_name = {
            name: LoRARequest(lora_name=name, lora_int_id=i, lora_path=path)
            for i, (name, path) in enumerate(sorted(loras.items()), start=1)
        }

    def get(self, name: str) -> LoRARequest | None:
        return self._by_name.get(name) if name else None
