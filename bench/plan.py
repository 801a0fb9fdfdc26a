"""The requests of a run, decided before it starts: prompts, lengths, classes, arrival times.

Everything is a function of the scenario's seed, so two runs of a scenario send the same load.
Prompts are made of plain words (about one token each for the sim tokenizer).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from bench.scenario import Fixed, Length, Lognormal, Scenario, Uniform

_WORD_TEXT = (
    "river stone light garden window morning paper music forest island valley bridge tower "
    "castle letter story number market winter summer spring autumn table voice heart mind "
    "field mountain village street church friend mother father sister brother quiet gentle "
    "bright warm cold soft quick slow early late young open close deep wide free full clear"
)
_WORDS = tuple(_WORD_TEXT.split())


def sample_length(length: Length, rng: random.Random) -> int:
    if isinstance(length, int):
        return length
    if isinstance(length, Fixed):
        return length.value
    if isinstance(length, Uniform):
        return rng.randint(length.min, length.max)
    if isinstance(length, Lognormal):
        value = round(rng.lognormvariate(math.log(length.median), length.sigma))
        return min(max(value, length.min), length.max)
    raise TypeError(f"not a length: {length!r}")


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(_WORDS, k=n))


def unique_tag(index: int) -> str:
    """Words that spell `index` in base len(_WORDS): no two requests share a suffix."""
    out = []
    while True:
        index, digit = divmod(index, len(_WORDS))
        out.append(_WORDS[digit])
        if index == 0:
            return " ".join(out)


@dataclass(frozen=True, slots=True)
class RequestSpec:
    index: int
    cls: int  # index into the scenario's classes (0 when it has none)
    prompt: str
    max_tokens: int
    prefix: int  # which shared prefix it starts with; -1: none
    arrival_s: float  # open loop: when to send it, from the start of its phase


class Plan:
    """The warmup and the measured requests of a scenario."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        rng = random.Random(scenario.seed)
        mix = scenario.prefix
        self.prefixes = (
            [
                words(random.Random(f"{scenario.seed}/prefix/{i}"), mix.tokens)
                for i in range(mix.count)
            ]
            if mix is not None
            else []
        )
        weights = [c.weight for c in scenario.classes] or [1.0]
        n = scenario.warmup_requests + scenario.requests
        specs: list[RequestSpec] = []
        at = 0.0
        for i in range(n):
            if i == scenario.warmup_requests:
                at = 0.0
            if scenario.rate_rps is not None:
                at += rng.expovariate(scenario.rate_rps)
            specs.append(self._spec(i, rng, weights, at))
        self.warmup = specs[: scenario.warmup_requests]
        self.measured = specs[scenario.warmup_requests :]

    def _spec(self, i: int, rng: random.Random, weights: list[float], at: float) -> RequestSpec:
        s = self.scenario
        cls = rng.choices(range(len(weights)), weights)[0] if len(weights) > 1 else 0
        own = s.classes[cls].prompt_tokens if s.classes else None
        prompt_len = sample_length(s.prompt_tokens if own is None else own, rng)
        max_tokens = sample_length(s.output_tokens, rng)
        tag = unique_tag(i)
        prefix = -1
        if self.prefixes and rng.random() < (s.prefix.fraction if s.prefix else 0.0):
            prefix = rng.randrange(len(self.prefixes))
        rest = max(prompt_len - len(tag.split()), 0)
        body = f"{tag} {words(rng, rest)}" if rest else tag
        prompt = f"{self.prefixes[prefix]} {body}" if prefix >= 0 else body
        return RequestSpec(i, cls, prompt, max_tokens, prefix, at)
