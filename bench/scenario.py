"""A bench scenario: what load to send (msgspec-typed YAML; errors name the bad field).

Scenario files live in bench/scenarios/ (`--scenario W2` finds `w2.yaml`); command-line flags
override single fields and the result is validated again as a whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import yaml

PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]
NonNegativeFloat = Annotated[float, msgspec.Meta(ge=0)]
Fraction = Annotated[float, msgspec.Meta(ge=0, le=1)]
TokenCount = Annotated[int, msgspec.Meta(gt=0, le=131072)]

SCENARIO_DIR = Path(__file__).parent / "scenarios"
MAX_REQUESTS = 1_000_000


class ScenarioError(ValueError):
    pass


class Base(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    pass


class Fixed(
    Base, frozen=True, forbid_unknown_fields=True, kw_only=True, tag_field="kind", tag="fixed"
):
    value: TokenCount


class Uniform(
    Base, frozen=True, forbid_unknown_fields=True, kw_only=True, tag_field="kind", tag="uniform"
):
    min: TokenCount
    max: TokenCount

    def __post_init__(self) -> None:
        if self.min > self.max:
            raise ValueError(f"uniform: min {self.min} is above max {self.max}")


class Lognormal(
    Base, frozen=True, forbid_unknown_fields=True, kw_only=True, tag_field="kind", tag="lognormal"
):
    """exp(N(ln(median), sigma)), rounded and clipped to [min, max]."""

    median: PositiveFloat
    sigma: NonNegativeFloat
    min: TokenCount = 1
    max: TokenCount

    def __post_init__(self) -> None:
        if self.min > self.max:
            raise ValueError(f"lognormal: min {self.min} is above max {self.max}")


# A bare integer means a fixed length.
Length = TokenCount | Fixed | Uniform | Lognormal


class TrafficClass(Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A priority class and/or tenant; requests pick a class by weight."""

    name: str
    weight: PositiveFloat = 1.0
    # Sent as the `x-priority` header (HTTP) or the `priority` field (gRPC); None: not sent.
    priority: int | None = None
    # Sent as `Authorization: Bearer <api_key>`; None: not sent.
    api_key: str | None = None
    # Latency targets, sent as `x-slo-ttft-ms` / `x-slo-tpot-ms` (HTTP); the report counts
    # the class's requests that met them (goodput). None: not sent, not counted.
    slo_ttft_ms: PositiveFloat | None = None
    slo_tpot_ms: PositiveFloat | None = None
    # The class's own prompt length (its tenant sends longer or shorter prompts); None: the
    # scenario's.
    prompt_tokens: Length | None = None


class PrefixMix(Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """`count` distinct long prefixes; a request that uses one appends its own unique suffix."""

    count: PositiveInt
    tokens: TokenCount
    # The share of requests that start with a shared prefix (the rest are all unique).
    fraction: Fraction = 1.0


class Scenario(Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: str
    description: str = ""
    api: Literal["http", "grpc", "engine", "link"] = "http"
    endpoint: Literal["chat", "completions"] = "chat"
    model: str = "sim-llama"
    # closed: `concurrency` streams, each sends its next request when one ends.
    # open: Poisson arrivals at `rate_rps`; at most `concurrency` in flight (more: an error).
    mode: Literal["closed", "open"] = "closed"
    concurrency: PositiveInt = 1
    rate_rps: PositiveFloat | None = None
    # Bounds: the measured requests, and the time in which they are sent.
    requests: Annotated[int, msgspec.Meta(gt=0, le=MAX_REQUESTS)]
    duration_s: PositiveFloat = 600.0
    # Sent before the measured window (same mode), not counted.
    warmup_requests: Annotated[int, msgspec.Meta(ge=0, le=MAX_REQUESTS)] = 0
    prompt_tokens: Length = 64
    output_tokens: Length = 32
    # vLLM's extension: every request then gets exactly its max_tokens (verified).
    ignore_eos: bool = True
    classes: list[TrafficClass] = []
    prefix: PrefixMix | None = None
    seed: int = 0
    connect_timeout_s: PositiveFloat = 5.0
    request_timeout_s: PositiveFloat = 120.0

    def __post_init__(self) -> None:
        if self.mode == "open" and self.rate_rps is None:
            raise ValueError("mode open needs rate_rps")
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate class names: {names}")


def _convert(data: Any, origin: str) -> Scenario:
    try:
        return msgspec.convert(data, Scenario)
    except msgspec.ValidationError as e:
        raise ScenarioError(f"{origin}: {e}") from None


def parse(text: str, origin: str = "<scenario>") -> Scenario:
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ScenarioError(f"{origin}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{origin}: a scenario is a mapping of fields")
    return _convert(data, origin)


def resolve(name_or_path: str) -> Path:
    """`W2` -> bench/scenarios/w2.yaml; anything with a slash or suffix is a path."""
    p = Path(name_or_path)
    if p.suffix or "/" in name_or_path:
        return p
    return SCENARIO_DIR / f"{name_or_path.lower()}.yaml"


def available() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def load(name_or_path: str) -> Scenario:
    p = resolve(name_or_path)
    try:
        text = p.read_text()
    except OSError as e:
        known = ", ".join(available())
        raise ScenarioError(f"{p}: {e.strerror} (known scenarios: {known})") from None
    return parse(text, str(p))


def override(scenario: Scenario, changes: dict[str, Any]) -> Scenario:
    """`scenario` with `changes` applied, validated again as a whole."""
    if not changes:
        return scenario
    data = msgspec.to_builtins(scenario)
    data.update(changes)
    return _convert(data, "command line")


def parse_length(text: str) -> Any:
    """A length flag as scenario data: `32`, `16-128` (uniform) or `lognormal:MEDIAN,SIGMA,MAX`."""
    t = text.strip()
    try:
        if t.startswith("lognormal:"):
            median, sigma, hi = t.removeprefix("lognormal:").split(",")
            return {
                "kind": "lognormal",
                "median": float(median),
                "sigma": float(sigma),
                "max": int(hi),
            }
        if "-" in t:
            lo, hi = t.split("-")
            return {"kind": "uniform", "min": int(lo), "max": int(hi)}
        return int(t)
    except ValueError:
        raise ScenarioError(
            f"bad length {text!r}: use N, MIN-MAX or lognormal:MEDIAN,SIGMA,MAX"
        ) from None
