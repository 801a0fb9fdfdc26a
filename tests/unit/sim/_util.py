"""Helpers shared by the sim backend tests."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine_sidecar.backend import EngineDelta, EngineRequest, Finish, Sampling
from engine_sidecar.backends.sim.config import SimConfig
from engine_sidecar.backends.sim.core import SimCore
from tests.requests import engine_request


def prompt_ids(n: int, salt: int = 0) -> tuple[int, ...]:
    return tuple(4 + (i * 31 + salt * 7) % 500 for i in range(n))


def req(
    key: int,
    ids: tuple[int, ...] | None = None,
    *,
    max_tokens: int = 32,
    seed: int | None = None,
    stop: tuple[str, ...] = (),
    ignore_eos: bool = False,
    resume: tuple[int, ...] = (),
    priority: int = 0,
    request_id: str | None = None,
    model: str = "sim-llama",
) -> EngineRequest:
    return engine_request(
        key,
        request_id=request_id if request_id is not None else f"req-{key}",
        model=model,
        sampling=Sampling(max_tokens=max_tokens, seed=seed, stop=stop, ignore_eos=ignore_eos),
        prompt_token_ids=ids if ids is not None else prompt_ids(16, key),
        resume_token_ids=resume,
        priority=priority,
    )


@dataclass
class Run:
    """Everything one request received, in order."""

    deltas: list[EngineDelta] = field(default_factory=list)

    @property
    def tokens(self) -> list[int]:
        return [t for d in self.deltas for t in d.token_ids]

    @property
    def text(self) -> str:
        return "".join(d.text for d in self.deltas)

    @property
    def final(self) -> EngineDelta:
        assert self.deltas and self.deltas[-1].finish != Finish.NONE
        return self.deltas[-1]


def drain(core: SimCore, max_steps: int = 100_000) -> dict[int, Run]:
    """Step the core until it has no work; checks the per-step contract on the way."""
    runs: dict[int, Run] = {}
    for _ in range(max_steps):
        if not core.has_work:
            return runs
        result = core.step()
        keys = [d.key for d in result.deltas]
        assert len(keys) == len(set(keys)), "more than one delta for a request in one step"
        assert core.num_running <= core.config.max_num_seqs
        core.kv.check()
        for d in result.deltas:
            run = runs.setdefault(d.key, Run())
            assert not run.deltas or run.deltas[-1].finish == Finish.NONE, "delta after final"
            run.deltas.append(d)
    raise AssertionError("the core did not finish")


def run_one(config: SimConfig, request: EngineRequest) -> Run:
    core = SimCore(config)
    core.add(request)
    return drain(core)[request.key]
