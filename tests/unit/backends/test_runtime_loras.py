"""The sidecar's LoadLora/UnloadLora checks (vLLM's), the backends that refuse them, the ids of
adapters loaded at run time, and the tiny random adapter's files."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from engine_sidecar import loras
from engine_sidecar.backend import ErrorCode, RequestError
from engine_sidecar.backends.openai import OpenAIConfig
from engine_sidecar.backends.sim import SimBackend, SimConfig
from engine_sidecar.backends.tiny_lora import RANK, module_sizes, write_tiny_lora
from engine_sidecar.backends.triton import TritonConfig


def sim(*adapters: str) -> SimBackend:
    return SimBackend(SimConfig(model="sim-llama", loras=list(adapters)))


def adapters_of(backend: SimBackend) -> tuple[str, ...]:
    return backend.info().models[0].loras


async def test_the_sim_loads_and_unloads_adapters_by_name() -> None:
    backend = sim("kept")
    await loras.load(backend, "sql", "/not/read/by/the/sim")
    assert adapters_of(backend) == ("kept", "sql")
    await loras.unload(backend, "kept")
    assert adapters_of(backend) == ("sql",)


@pytest.mark.parametrize(
    ("name", "path", "code", "field", "message"),
    [
        ("", "/a", ErrorCode.INVALID_ARGUMENT, "lora_name", "Both 'lora_name' and 'lora_path'"),
        ("x", "", ErrorCode.INVALID_ARGUMENT, "lora_path", "Both 'lora_name' and 'lora_path'"),
        ("sim-llama", "/a", ErrorCode.INVALID_ARGUMENT, "lora_name", "conflicts with a served"),
        ("kept", "/a", ErrorCode.INVALID_ARGUMENT, "lora_name", "has already been loaded"),
    ],
)
async def test_a_load_vllm_would_refuse_is_refused(
    name: str, path: str, code: ErrorCode, field: str, message: str
) -> None:
    backend = sim("kept")
    with pytest.raises(RequestError) as caught:
        await loras.load(backend, name, path)
    assert (caught.value.code, caught.value.field) == (code, field)
    assert message in caught.value.message
    assert adapters_of(backend) == ("kept",)


async def test_unloading_an_unknown_adapter_is_not_found() -> None:
    backend = sim("kept")
    with pytest.raises(RequestError) as caught:
        await loras.unload(backend, "other")
    assert caught.value.code is ErrorCode.NOT_FOUND
    assert caught.value.message == "The lora adapter 'other' cannot be found."
    with pytest.raises(RequestError) as empty:
        await loras.unload(backend, "")
    assert empty.value.code is ErrorCode.INVALID_ARGUMENT


async def test_engines_that_cannot_load_adapters_refuse_by_name() -> None:
    pytest.importorskip("tritonclient")
    from engine_sidecar.backends.openai.backend import OpenAIBackend
    from engine_sidecar.backends.triton.backend import TritonBackend

    triton = TritonBackend(TritonConfig(model="m"))
    openai = OpenAIBackend(OpenAIConfig(model="m"))
    for backend, name in ((triton, "triton"), (openai, "openai")):
        with pytest.raises(loras.Unsupported, match=f"the {name} engine does not load LoRA"):
            await loras.load(backend, "x", "/a")
        with pytest.raises(loras.Unsupported):
            await loras.unload(backend, "x")


def test_adapters_loaded_at_run_time_never_reuse_an_id() -> None:
    pytest.importorskip("vllm")
    from engine_sidecar.backends.vllm.sampling import LoraRequests

    requests = LoraRequests({"b": "/b", "a": "/a"})
    assert [requests.get(n).lora_int_id for n in ("a", "b")] == [1, 2]  # type: ignore[union-attr]
    first = requests.new("c", "/c1")
    requests.add(first)
    assert requests.remove("c") is first and requests.get("c") is None
    again = requests.new("c", "/c2")  # the same name from another path: another adapter
    assert (first.lora_int_id, again.lora_int_id) == (3, 4)
    assert requests.names() == {"a", "b"}


def test_the_tiny_adapter_is_a_peft_lora_with_non_zero_factors(tmp_path: Path) -> None:
    path = write_tiny_lora(tmp_path / "lora", seed=1)
    config = json.loads((path / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"]) == ("LORA", RANK)
    data = (path / "adapter_model.safetensors").read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    header.pop("__metadata__")
    assert len(header) == 2 * 2 * len(module_sizes())  # two layers, A and B of each module
    _, n_out = module_sizes()["v_proj"]
    b = header["base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"]
    assert (b["dtype"], b["shape"]) == ("F32", [n_out, RANK])
    start, end = b["data_offsets"]
    values = struct.unpack(f"<{(end - start) // 4}f", data[8 + size + start : 8 + size + end])
    assert any(values) and max(map(abs, values)) <= 0.5
    assert 8 + size + max(t["data_offsets"][1] for t in header.values()) == len(data)
    assert (
        write_tiny_lora(tmp_path / "same", seed=1)
        .joinpath("adapter_model.safetensors")
        .read_bytes()
        == data
    )
