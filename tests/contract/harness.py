"""Drives any Backend the way the sidecar does, and records what its sink receives."""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine_sidecar.backend import (
    Backend,
    ChatMessage,
    EngineDelta,
    EngineRequest,
    Finish,
    Sampling,
)
from tests.requests import engine_request

WAIT_S = 120.0  # generous: a noisy 2-core machine runs the CPU engine slowly
_keys = itertools.count(1_000_000)


class Collector:
    """The sink: every call kept in order, deltas grouped by key, waiters woken."""

    def __init__(self) -> None:
        self.calls: list[list[EngineDelta]] = []
        self.by_key: dict[int, list[EngineDelta]] = defaultdict(list)
        self._changed = asyncio.Event()

    def sink(self, deltas: list[EngineDelta]) -> None:
        self.calls.append(list(deltas))
        for d in deltas:
            self.by_key[d.key].append(d)
        self._changed.set()

    async def until(self, done: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
        async with asyncio.timeout(timeout_s):
            while not done():
                self._changed.clear()
                await self._changed.wait()

    async def first(self, key: int) -> EngineDelta:
        await self.until(lambda: bool(self.by_key.get(key)))
        return self.by_key[key][0]

    async def finished(self, key: int) -> list[EngineDelta]:
        await self.until(lambda: self.done(key))
        return self.by_key[key]

    def done(self, key: int) -> bool:
        deltas = self.by_key.get(key)
        return bool(deltas) and deltas[-1].finish is not Finish.NONE  # type: ignore[index]

    def position(self, key: int) -> int:
        """Index of the sink call that first carried this key."""
        return next(i for i, call in enumerate(self.calls) if any(d.key == key for d in call))


@dataclass(frozen=True)
class Caps:
    """What a backend can promise beyond the common contract."""

    exact_resume: bool = True  # resumed greedy output equals the uninterrupted one
    stop_strings: bool = True  # the engine applies stop strings (and holds text back for them)
    token_ids: bool = True  # deltas carry the engine's own token ids
    step_batches: bool = True  # one engine step's deltas come in one sink call
    logprobs: bool = False  # the engine gives logprobs


@dataclass
class Harness:
    kind: str
    backend: Backend
    model: str
    caps: Caps
    collector: Collector = field(default_factory=Collector)
    server: Any = None  # the fake Triton server, for Triton backends
    tokenizer: Any = None  # the engine's tokenizer (its `decode(ids)` is all the tests use)

    @property
    def max_model_len(self) -> int:
        return self.backend.info().models[0].max_model_len

    @property
    def max_num_seqs(self) -> int:
        return self.backend.info().max_num_seqs

    def request(self, **kw: Any) -> EngineRequest:
        fields = {
            "max_tokens": kw.pop("max_tokens", 8),
            "temperature": kw.pop("temperature", 0.0),
            "ignore_eos": kw.pop("ignore_eos", True),
            "stop": kw.pop("stop", ()),
            "logprobs": kw.pop("logprobs", None),
            **kw.pop("sampling", {}),  # any other sampling field
        }
        sampling = Sampling(**fields)
        if not {"prompt", "messages", "prompt_token_ids"} & kw.keys():
            kw["messages"] = (ChatMessage("user", "Tell me about shards."),)
        kw.setdefault("request_id", "contract")
        model = kw.pop("model", self.model)
        return engine_request(next(_keys), model=model, sampling=sampling, **kw)

    def submit(self, **kw: Any) -> int:
        r = self.request(**kw)
        self.backend.submit(r)
        return r.key

    async def run(self, **kw: Any) -> list[EngineDelta]:
        return await self.collector.finished(self.submit(**kw))


async def eventually(check: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    """Wait for a condition that no event announces (engine stats, a server's records)."""
    async with asyncio.timeout(timeout_s):
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


def tokens(deltas: list[EngineDelta]) -> list[int]:
    return [t for d in deltas for t in d.token_ids]


def text(deltas: list[EngineDelta]) -> str:
    return "".join(d.text for d in deltas)


def split_cuts(decode: Callable[[list[int]], str], ids: list[int]) -> list[int]:
    """The cuts 0 < k < len(ids) where the text of ids[:k] ends inside a character."""
    return [k for k in range(1, len(ids)) if decode(ids[:k]).endswith("\ufffd")]


def whole_text(decode: Callable[[list[int]], str], ids: list[int]) -> str:
    """The text of ids up to the last token that ends on a whole character: what a client has
    been sent when these tokens have come (the rest waits for the rest of its character)."""
    whole = [k for k in range(len(ids), 0, -1) if not decode(ids[:k]).endswith("\ufffd")]
    return decode(ids[: whole[0]]) if whole else ""


def cut_at(deltas: list[EngineDelta], k: int) -> int:
    """The first cut between deltas after at least k token ids (a lagging reader may get one
    delta for several engine steps), short of the last token."""
    n = 0
    for d in deltas:
        n += len(d.token_ids)
        if n >= k:
            break
    assert n < len(tokens(deltas)), f"no cut between deltas after {k} tokens"
    return n


def sent_before(deltas: list[EngineDelta], k: int) -> str:
    """The text of the deltas that carried the first k token ids (k falls between deltas)."""
    n, parts = 0, []
    for d in deltas:
        if n >= k:
            break
        parts.append(d.text)
        n += len(d.token_ids)
    assert n == k, f"cut {k} falls inside a delta"
    return "".join(parts)
