from __future__ import annotations

from typing import Any

import msgspec
import pytest

from engine_sidecar.backends.sim.config import SimConfig, SimFaults
from engine_sidecar.backends.sim.profiles import PROFILES, TimingProfile, step_time_s


def test_defaults() -> None:
    c = SimConfig()
    assert (c.model, c.max_model_len, c.max_num_seqs, c.profile) == (
        "sim-llama",
        4096,
        256,
        "instant",
    )
    assert c.faults == SimFaults()
    assert c.loras == []


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"profile": "warp-speed"}, "warp-speed"),
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"block_size": -1}, "block_size"),
        ({"eos_every": -1}, "eos_every"),
        ({"multibyte_every": -1}, "multibyte_every"),
        ({"first_step_delay_s": -1}, "first_step_delay_s"),
        ({"faults": {"error_rate": 1.5}}, "error_rate"),
        ({"faults": {"crash_after_tokens": 0}}, "crash_after_tokens"),
        ({"faults": {"slow_token_s": -0.1}}, "slow_token_s"),
        ({"faults": {"bogus": 1}}, "bogus"),
        ({"bogus": 1}, "bogus"),
        ({"max_model_len": 4096, "num_kv_blocks": 100}, "num_kv_blocks"),
    ],
)
def test_bad_config_names_the_field(data: dict[str, Any], needle: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=needle):
        msgspec.convert(data, SimConfig)


@pytest.mark.parametrize(
    "kwargs",
    [{"profile": "nope"}, {"max_num_seqs": 0}, {"max_model_len": 64, "num_kv_blocks": 1}],
)
def test_direct_construction_is_checked(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SimConfig(**kwargs)


def test_decodes_from_plain_data() -> None:
    c = msgspec.convert(
        {"profile": "llama-70b-a100-tp8", "loras": ["a"], "faults": {"error_rate": 0.5}},
        SimConfig,
    )
    assert c.profile == "llama-70b-a100-tp8" and c.loras == ["a"] and c.faults.error_rate == 0.5


@pytest.mark.parametrize(
    ("profile", "running", "prefill", "expected"),
    [
        ("instant", 256, 10_000, 0.0),
        ("fast", 1, 0, 0.002 + 0.00002),
        ("fast", 0, 100, 100 * 0.00001),
        ("llama-70b-a100-tp8", 1, 0, 0.022 + 0.0001),
        ("llama-70b-a100-tp8", 0, 0, 0.0),
        ("llama-70b-a100-tp8", 10, 1000, 0.022 + 0.001 + 0.005 + 0.12),
    ],
)
def test_step_time(profile: str, running: int, prefill: int, expected: float) -> None:
    assert step_time_s(PROFILES[profile], running, prefill) == pytest.approx(expected)


def test_llama_profile_matches_the_seeds() -> None:
    p = PROFILES["llama-70b-a100-tp8"]
    assert 40 <= 1 / step_time_s(p, 1, 0) <= 50  # ~45 tokens/s for one stream
    assert 7000 <= 1 / p.prefill_per_token_s <= 9000  # ~8k tokens/s prefill
    assert isinstance(p, TimingProfile)
