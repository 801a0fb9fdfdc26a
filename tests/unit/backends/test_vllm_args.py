"""VllmConfig -> engine arguments, and the configs shipped in configs/."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from engine_sidecar.backends.vllm import VllmConfig
from engine_sidecar.backends.vllm.args import engine_kwargs
from engine_sidecar.config import SidecarConfig, decode
from tests.engines import require

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
ENGINE_CONFIGS = ["local-vllm.yaml", "gpu-llama2-70b.yaml", "gpu-pp2-two-nodes.yaml"]


def test_typed_fields_and_pass_through() -> None:
    c = VllmConfig(
        model="org/model",
        tensor_parallel_size=8,
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        loras={"sql": "/loras/sql"},
        engine_args={"enable_chunked_prefill": True},
    )
    kw = engine_kwargs(c)
    assert kw["model"] == "org/model"
    assert kw["served_model_name"] == "org/model"
    assert (kw["tensor_parallel_size"], kw["max_num_seqs"]) == (8, 256)
    assert kw["max_num_batched_tokens"] == 8192
    assert kw["scheduling_policy"] == "priority"
    assert kw["enable_lora"] is True
    assert kw["enable_chunked_prefill"] is True
    assert kw["disable_log_stats"] is True
    assert "max_model_len" not in kw  # unset: vLLM takes the model's


def test_tiny_llama_is_built_and_loads_random_weights(tmp_path: Path) -> None:
    require("tokenizers")
    kw = engine_kwargs(VllmConfig(model="tiny-llama", tiny_model_dir=str(tmp_path / "t")))
    assert kw["model"] == str(tmp_path / "t")
    assert kw["load_format"] == "dummy"
    assert kw["served_model_name"] == "tiny-llama"
    assert (tmp_path / "t" / "config.json").is_file()


def test_a_shard_group_of_nodes_sets_nnodes() -> None:
    kw = engine_kwargs(VllmConfig(model="m", pipeline_parallel_size=2), rank=1, world_size=2)
    assert (kw["nnodes"], kw["node_rank"]) == (2, 1)


def test_engine_args_may_not_repeat_typed_fields() -> None:
    with pytest.raises(ValueError, match="max_num_seqs"):
        VllmConfig(model="m", engine_args={"max_num_seqs": 4})


def test_a_real_backend_needs_its_section() -> None:
    with pytest.raises(ValueError, match="vllm"):
        SidecarConfig(backend="vllm")
    assert decode({"backend": "vllm", "vllm": {"model": "m"}}).vllm == VllmConfig(model="m")


def test_priority_classes_map_to_vllm_order() -> None:
    require("vllm")
    from engine_sidecar.backends.vllm.sampling import engine_priority

    assert engine_priority(5, "priority") < engine_priority(0, "priority")  # runs first
    assert engine_priority(5, "fcfs") == 0


@pytest.mark.parametrize("name", ENGINE_CONFIGS)
def test_shipped_vllm_configs_name_real_engine_arguments(name: str) -> None:
    require("vllm")
    from vllm.engine.arg_utils import AsyncEngineArgs

    fields = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    for sidecar in yaml.safe_load((CONFIGS / name).read_text())["sidecars"]:
        launch = dict(sidecar["launch"])
        launch.update(name=sidecar["name"], port=0)
        config = decode(launch).vllm
        assert config is not None
        unknown = set(engine_kwargs(config.__class__(**{**_fields(config), "model": "m"}))) - fields
        assert not unknown, unknown


def _fields(config: VllmConfig) -> dict[str, object]:
    return {name: getattr(config, name) for name in config.__struct_fields__}


@pytest.mark.parametrize("name", ENGINE_CONFIGS)
def test_check_config_accepts_the_engine_configs(name: str) -> None:
    from gateway.cluster import check_launch
    from gateway.config.loader import load

    check_launch(load(str(CONFIGS / name)))


def test_enable_lora_turns_lora_on_with_no_adapter_at_start() -> None:
    on = engine_kwargs(VllmConfig(model="org/model", enable_lora=True, max_lora_rank=8))
    assert (on["enable_lora"], on["max_loras"], on["max_lora_rank"]) == (True, 1, 8)
    assert "enable_lora" not in engine_kwargs(VllmConfig(model="org/model"))
