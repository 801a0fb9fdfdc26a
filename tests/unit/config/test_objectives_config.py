from __future__ import annotations

import pytest

from gateway.config.loader import parse

BASE = 'sidecars: [{name: a, address: "127.0.0.1:1"}]\n'


def test_tenant_and_class_objectives_parse() -> None:
    c = parse(
        BASE
        + "tenants:\n"
        + "  - {name: chat, keys: [k], objectives: {ttft_ms: 1500, tpot_ms: 40}}\n"
        + "scheduling: {objectives: false, classes: {-1: {objectives: {ttft_ms: 3000}}}}\n"
    )
    t = c.tenants[0].objectives
    assert t is not None and (t.ttft_ms, t.tpot_ms) == (1500, 40)
    k = c.scheduling.bounds(-1).objectives
    assert k is not None and (k.ttft_ms, k.tpot_ms) == (3000, None)
    assert c.scheduling.objectives is False
    assert parse(BASE).scheduling.objectives is True


@pytest.mark.parametrize("value", ["0", "-1", "3600001", "soon"])
def test_a_target_out_of_bounds_names_its_field(value: str) -> None:
    with pytest.raises(ValueError, match="ttft_ms"):
        parse(BASE + f"scheduling: {{default: {{objectives: {{ttft_ms: {value}}}}}}}\n")
