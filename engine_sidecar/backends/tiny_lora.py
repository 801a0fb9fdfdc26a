"""A small random LoRA adapter for the tiny Llama (backends/tiny_model.py), for laptops and tests.

PEFT's layout: `adapter_config.json` and `adapter_model.safetensors`, every linear layer of both
decoder layers adapted at rank 8. The weights are seeded random numbers with both factors
non-zero (PEFT starts B at zero, an adapter that changes nothing): loaded on the tiny model, the
adapter changes its output. The safetensors file is written by hand (an 8-byte header length,
a JSON header, then the float32 tensors), so building one needs neither torch nor numpy.
"""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path
from typing import Any

from engine_sidecar.backends.tiny_model import TINY_MODEL_NAME, llama_config

RANK = 8
ALPHA = 16
# Each adapted module -> (input size, output size) in the tiny Llama.
_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")


def module_sizes() -> dict[str, tuple[int, int]]:
    c = llama_config()
    hidden, inner, head = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * head, c["num_key_value_heads"] * head
    return {
        "q_proj": (hidden, q),
        "k_proj": (hidden, kv),
        "v_proj": (hidden, kv),
        "o_proj": (q, hidden),
        "gate_proj": (hidden, inner),
        "up_proj": (hidden, inner),
        "down_proj": (inner, hidden),
    }


def adapter_config() -> dict[str, Any]:
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": TINY_MODEL_NAME,
        "r": RANK,
        "lora_alpha": ALPHA,
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "target_modules": list(_ATTENTION + _MLP),
    }


def _tensors(seed: int, scale: float) -> dict[str, tuple[list[int], list[float]]]:
    rng = random.Random(seed)
    out: dict[str, tuple[list[int], list[float]]] = {}
    layers = llama_config()["num_hidden_layers"]
    for layer in range(layers):
        for module, (n_in, n_out) in module_sizes().items():
            part = "self_attn" if module in _ATTENTION else "mlp"
            prefix = f"base_model.model.model.layers.{layer}.{part}.{module}"
            a = [rng.uniform(-scale, scale) for _ in range(RANK * n_in)]
            b = [rng.uniform(-scale, scale) for _ in range(n_out * RANK)]
            out[f"{prefix}.lora_A.weight"] = ([RANK, n_in], a)
            out[f"{prefix}.lora_B.weight"] = ([n_out, RANK], b)
    return out


def safetensors_bytes(tensors: dict[str, tuple[list[int], list[float]]]) -> bytes:
    """float32 tensors by name -> the safetensors file format."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    chunks, offset = [], 0
    for name in sorted(tensors):
        shape, values = tensors[name]
        data = struct.pack(f"<{len(values)}f", *values)
        header[name] = {
            "dtype": "F32",
            "shape": shape,
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # (the data starts 8-byte aligned)
    return struct.pack("<Q", len(head)) + head + b"".join(chunks)


def write_tiny_lora(path: Path, seed: int = 0, scale: float = 0.5) -> Path:
    """Write the adapter directory at `path` (weights uniform in [-scale, scale])."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "adapter_config.json").write_text(json.dumps(adapter_config(), indent=2) + "\n")
    (path / "adapter_model.safetensors").write_bytes(safetensors_bytes(_tensors(seed, scale)))
    return path
