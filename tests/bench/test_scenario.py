"""Scenario files, flag overrides, and the deterministic request plan."""

from __future__ import annotations

import pytest

from bench import scenario
from bench.plan import Plan, sample_length
from bench.scenario import Fixed, Lognormal, Scenario, ScenarioError, Uniform


@pytest.mark.parametrize("name", ["W1", "W2", "W3", "prefix", "classes"])
def test_shipped_scenarios_load(name: str) -> None:
    assert scenario.load(name).name in (name, name.upper())


def test_the_workloads_are_what_they_say() -> None:
    w = {n: scenario.load(n) for n in ("W1", "W2", "W3")}
    assert [(s.output_tokens, s.concurrency, s.requests) for s in w.values()] == [
        (32, 1, 300),
        (32, 64, 3000),
        (256, 256, 1000),
    ]
    assert all(s.ignore_eos for s in w.values())
    classes = scenario.load("classes")
    assert len(classes.classes) == 2
    assert len({c.priority for c in classes.classes}) == 2


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("name: x\nrequests: 0", "$.requests"),
        ("name: x\nrequests: 5\nconcurrency: many", "$.concurrency"),
        ("name: x\nrequests: 5\noutput_tokens: {kind: uniform, min: 5}", "$.output_tokens"),
        ("name: x\nrequests: 5\nclasses: [{weight: 1}]", "$.classes[0]"),
        ("name: x\nrequests: 5\nbogus: 1", "bogus"),
    ],
)
def test_errors_name_the_field(text: str, field: str) -> None:
    with pytest.raises(ScenarioError, match=field.replace("$", r"\$").replace("[", r"\[")):
        scenario.parse(text, "f.yaml")


def test_cross_field_checks() -> None:
    with pytest.raises(ScenarioError, match="rate_rps"):
        scenario.parse("name: x\nrequests: 5\nmode: open", "f.yaml")
    with pytest.raises(ScenarioError, match="min 9 is above max 3"):
        scenario.parse("name: x\nrequests: 5\noutput_tokens: {kind: uniform, min: 9, max: 3}")


def test_unknown_scenario_lists_the_known_ones() -> None:
    with pytest.raises(ScenarioError, match=r"known scenarios: .*w2"):
        scenario.load("nope")


def test_overrides_are_validated_as_a_whole() -> None:
    s = scenario.override(scenario.load("W2"), {"requests": 10, "mode": "open", "rate_rps": 5.0})
    assert (s.requests, s.mode, s.rate_rps, s.concurrency) == (10, "open", 5.0, 64)
    with pytest.raises(ScenarioError, match="command line"):
        scenario.override(s, {"requests": -1})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("32", 32),
        ("16-128", Uniform(min=16, max=128)),
        ("lognormal:128,0.5,1024", Lognormal(median=128, sigma=0.5, max=1024)),
    ],
)
def test_length_flags(text: str, expected: object) -> None:
    base = Scenario(name="x", requests=1)
    s = scenario.override(base, {"output_tokens": scenario.parse_length(text)})
    assert s.output_tokens == expected


def test_bad_length_flag() -> None:
    with pytest.raises(ScenarioError, match="bad length"):
        scenario.parse_length("lots")


def test_lengths_stay_in_bounds() -> None:
    import random

    rng = random.Random(1)
    assert sample_length(Fixed(value=7), rng) == 7
    assert {sample_length(Uniform(min=2, max=4), rng) for _ in range(200)} == {2, 3, 4}
    ln = Lognormal(median=100, sigma=2.0, min=10, max=300)
    values = [sample_length(ln, rng) for _ in range(500)]
    assert min(values) == 10 and max(values) == 300


def test_plan_is_deterministic_with_unique_prompts() -> None:
    s = Scenario(name="x", requests=50, warmup_requests=5, prompt_tokens=8)
    a, b = Plan(s), Plan(s)
    assert a.measured == b.measured and a.warmup == b.warmup
    prompts = [r.prompt for r in a.warmup + a.measured]
    assert len(set(prompts)) == 55
    assert all(len(p.split()) == 8 for p in prompts)


def test_plan_shares_prefixes_and_mixes_classes() -> None:
    s = scenario.override(
        scenario.load("prefix"),
        {"requests": 400, "warmup_requests": 0, "classes": [
            {"name": "a", "weight": 3}, {"name": "b", "weight": 1}]},
    )  # fmt: skip
    plan = Plan(s)
    assert s.prefix is not None
    with_prefix = [r for r in plan.measured if r.prefix >= 0]
    assert 0.8 < len(with_prefix) / 400 <= 1.0
    assert {r.prefix for r in with_prefix} == set(range(s.prefix.count))
    for r in with_prefix:
        assert r.prompt.startswith(plan.prefixes[r.prefix] + " ")
    share_a = sum(1 for r in plan.measured if r.cls == 0) / 400
    assert 0.65 < share_a < 0.85


def test_open_loop_arrivals_follow_the_rate() -> None:
    s = Scenario(name="x", requests=2000, mode="open", rate_rps=100.0)
    arrivals = [r.arrival_s for r in Plan(s).measured]
    assert arrivals == sorted(arrivals)
    assert 18.0 < arrivals[-1] < 22.0
