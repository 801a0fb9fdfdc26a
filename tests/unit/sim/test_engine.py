from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from engine_sidecar.backend import (
    ChatMessage,
    EngineDelta,
    EngineRequest,
    ErrorCode,
    Finish,
    RequestError,
    Sampling,
)
from engine_sidecar.backends.sim import SimBackend, SimConfig, SimFaults
from engine_sidecar.backends.sim.tokenizer import VOCAB_SIZE, SimTokenizer
from tests.requests import engine_request

from ._util import prompt_ids, req

TOK = SimTokenizer()


class Sink:
    def __init__(self) -> None:
        self.calls: list[list[EngineDelta]] = []

    def __call__(self, deltas: list[EngineDelta]) -> None:
        assert deltas, "the sink is never called with an empty list"
        self.calls.append(deltas)

    def of(self, key: int) -> list[EngineDelta]:
        return [d for call in self.calls for d in call if d.key == key]

    def finished(self, key: int) -> bool:
        ds = self.of(key)
        return bool(ds) and ds[-1].finish != Finish.NONE


async def until(cond: Callable[[], bool], max_yields: int = 20_000) -> None:
    for _ in range(max_yields):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


async def yields(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def start(config: SimConfig, **kwargs: Any) -> tuple[SimBackend, Sink]:
    backend = SimBackend(config, **kwargs)
    sink = Sink()
    await backend.start(sink)
    return backend, sink


def chat(key: int, content: str, max_tokens: int = 16) -> EngineRequest:
    return engine_request(
        key,
        request_id=f"c{key}",
        model="sim-llama",
        sampling=Sampling(max_tokens=max_tokens),
        messages=(ChatMessage("user", content),),
    )


def text_req(key: int, prompt: str | None, max_tokens: int = 16, **kw: Any) -> EngineRequest:
    return engine_request(
        key,
        request_id=f"t{key}",
        model=kw.pop("model", "sim-llama"),
        sampling=Sampling(max_tokens=max_tokens),
        prompt=prompt,
        **kw,
    )


# --- validation --------------------------------------------------------------------------
LONG_WORDS = " the" * 5000


@pytest.mark.parametrize(
    ("request_", "code", "field"),
    [
        (text_req(1, "hi", model="gpt-9"), ErrorCode.NOT_FOUND, "model"),
        (text_req(1, "hi", lora="nope"), ErrorCode.NOT_FOUND, "lora"),
        (text_req(1, None), ErrorCode.INVALID_ARGUMENT, "prompt"),
        (
            text_req(1, "hi", messages=(ChatMessage("user", "x"),)),
            ErrorCode.INVALID_ARGUMENT,
            "prompt",
        ),
        (text_req(1, ""), ErrorCode.INVALID_ARGUMENT, "prompt"),
        (text_req(1, "hi", max_tokens=0), ErrorCode.INVALID_ARGUMENT, "max_tokens"),
        (text_req(1, "hi", max_tokens=-3), ErrorCode.INVALID_ARGUMENT, "max_tokens"),
        (text_req(1, LONG_WORDS), ErrorCode.INVALID_ARGUMENT, "prompt"),
        (chat(1, LONG_WORDS), ErrorCode.INVALID_ARGUMENT, "messages"),
        (chat(1, " the" * 4050, max_tokens=64), ErrorCode.INVALID_ARGUMENT, "max_tokens"),
        (text_req(1, " the" * 4000, max_tokens=97), ErrorCode.INVALID_ARGUMENT, "max_tokens"),
        (
            engine_request(
                1, request_id="x", model="sim-llama", sampling=Sampling(max_tokens=8), messages=()
            ),
            ErrorCode.INVALID_ARGUMENT,
            "messages",
        ),
        (req(1, ()), ErrorCode.INVALID_ARGUMENT, "prompt"),
        (req(1, (5, VOCAB_SIZE)), ErrorCode.INVALID_ARGUMENT, "prompt"),
        (req(1, (5, -1)), ErrorCode.INVALID_ARGUMENT, "prompt"),
        (req(1, (5, 6), resume=(7, 99_999)), ErrorCode.INVALID_ARGUMENT, "resume_token_ids"),
        (req(1, max_tokens=2, resume=(7, 8, 9)), ErrorCode.INVALID_ARGUMENT, "resume_token_ids"),
    ],
)
def test_submit_validation(request_: EngineRequest, code: ErrorCode, field: str) -> None:
    backend = SimBackend(SimConfig(loras=["sql"]))
    with pytest.raises(RequestError) as e:
        backend.submit(request_)
    assert (e.value.code, e.value.field) == (code, field)
    assert e.value.message
    assert request_.key not in backend.core


def test_too_long_messages_read_like_vllm() -> None:
    backend = SimBackend(SimConfig())
    n = len(TOK.encode(TOK.apply_chat_template((ChatMessage("user", " the" * 4050),))))
    with pytest.raises(RequestError) as e:
        backend.submit(chat(1, " the" * 4050, max_tokens=64))
    assert e.value.field == "max_tokens"
    assert e.value.message == (
        f"This model's maximum context length is 4096 tokens. However, you requested "
        f"{n + 64} tokens ({n} in the messages, 64 in the completion). "
        "Please reduce the length of the messages or completion."
    )


def test_valid_inputs_and_duplicates() -> None:
    backend = SimBackend(SimConfig(loras=["sql"]))
    backend.submit(text_req(1, "Tell me a story"))
    backend.submit(chat(2, "Tell me a story"))
    backend.submit(req(3))
    backend.submit(text_req(4, "hi", lora="sql"))
    backend.submit(text_req(5, " the" * 4000, max_tokens=96))  # exactly max_model_len
    with pytest.raises(RequestError) as e:
        backend.submit(req(3))
    assert (e.value.code, e.value.field) == (ErrorCode.INVALID_ARGUMENT, "key")
    assert backend.load().waiting == 5


def test_info() -> None:
    info = SimBackend(SimConfig(model="m", max_model_len=2048, loras=["a", "b"])).info()
    assert info.backend == "sim" and info.max_num_seqs == 256
    assert [(m.name, m.max_model_len, m.loras) for m in info.models] == [("m", 2048, ("a", "b"))]


# --- the loop ----------------------------------------------------------------------------
async def test_end_to_end_instant() -> None:
    backend, sink = await start(SimConfig(max_num_seqs=2, eos_every=0))
    assert backend.load().ready and backend.healthy()
    backend.submit(text_req(1, "Once upon a time", max_tokens=5))
    backend.submit(chat(2, "hello there", max_tokens=7))
    backend.submit(req(3, max_tokens=3))
    await until(lambda: all(sink.finished(k) for k in (1, 2, 3)))
    for key, n, prompt_len in [
        (1, 5, len(TOK.encode("Once upon a time"))),
        (3, 3, 16),
    ]:
        ds = sink.of(key)
        assert ds[0].prompt_tokens == prompt_len
        assert ds[-1].finish == Finish.LENGTH and ds[-1].completion_tokens == n
        tokens = [t for d in ds for t in d.token_ids]
        assert len(tokens) == n and "".join(d.text for d in ds) == TOK.decode(tokens)
    assert all(len(call) <= 2 for call in sink.calls)  # max_num_seqs deltas per step
    await until(lambda: backend.load().running == 0)
    load = backend.load()
    assert (load.running, load.waiting, load.kv_usage) == (0, 0, 0.0)
    assert load.generated_tokens == 15 and load.max_num_seqs == 2
    # Idle: the loop waits for work, then picks up new requests.
    calls = len(sink.calls)
    await yields(50)
    assert len(sink.calls) == calls
    backend.submit(req(4, max_tokens=2))
    await until(lambda: sink.finished(4))
    await backend.stop()
    assert not backend.load().ready
    with pytest.raises(RequestError) as e:
        backend.submit(req(5))
    assert e.value.code == ErrorCode.UNAVAILABLE


async def test_same_request_same_output_through_the_backend() -> None:
    backend, sink = await start(SimConfig(eos_every=30))
    backend.submit(req(1, prompt_ids(64), max_tokens=100, seed=4))
    backend.submit(req(2, prompt_ids(64), max_tokens=100, seed=4))
    await until(lambda: sink.finished(1) and sink.finished(2))
    assert [d.token_ids for d in sink.of(1)] == [d.token_ids for d in sink.of(2)]
    await backend.stop()


async def test_abort_yields_no_further_delta() -> None:
    backend, sink = await start(SimConfig(eos_every=0))
    backend.submit(req(1, max_tokens=4000))
    backend.submit(req(2, max_tokens=10))
    await until(lambda: len(sink.of(1)) >= 3)
    backend.abort(1)
    backend.abort(777)
    seen = len(sink.of(1))
    await until(lambda: sink.finished(2))
    await yields(20)
    assert len(sink.of(1)) == seen and not sink.finished(1)
    assert backend.load().running == 0
    await backend.stop()
    assert len(sink.of(1)) == seen  # not even an ABORT at stop


async def test_stop_aborts_unfinished_requests() -> None:
    backend, sink = await start(SimConfig(max_num_seqs=1, eos_every=0, profile="fast"))
    backend.submit(req(1, max_tokens=1000))
    backend.submit(req(2, max_tokens=1000))
    await until(lambda: len(sink.of(1)) >= 1)
    await backend.stop()
    for key in (1, 2):
        final = sink.of(key)[-1]
        assert final.finish == Finish.ABORT
        assert final.prompt_tokens == 16
        assert final.completion_tokens == sum(len(d.token_ids) for d in sink.of(key))
    await backend.stop()  # twice is fine


async def test_error_rate_fault() -> None:
    faults = SimFaults(error_rate=1.0)
    backend, sink = await start(SimConfig(eos_every=0, faults=faults))
    backend.submit(req(1, max_tokens=50))
    await until(lambda: sink.finished(1))
    ds = sink.of(1)
    assert len(ds) == 2 and len(ds[0].token_ids) == 1
    assert ds[1].finish == Finish.ERROR and ds[1].error_code == ErrorCode.INTERNAL
    assert ds[1].error_message and ds[1].completion_tokens == 1
    await backend.stop()


async def test_error_rate_picks_a_stable_fraction() -> None:
    config = SimConfig(eos_every=0, faults=SimFaults(error_rate=0.3))
    failed: list[set[int]] = []
    for _ in range(2):
        backend, sink = await start(config)
        for k in range(200):
            backend.submit(req(k, max_tokens=3))
        await until(lambda: all(sink.finished(k) for k in range(200)))  # noqa: B023
        failed.append({k for k in range(200) if sink.of(k)[-1].finish == Finish.ERROR})
        await backend.stop()
    assert failed[0] == failed[1]
    assert 30 <= len(failed[0]) <= 90


async def test_hang_fault_stalls_but_stays_alive() -> None:
    backend, sink = await start(SimConfig(eos_every=0, faults=SimFaults(hang_after_tokens=5)))
    backend.submit(req(1, max_tokens=100))
    await until(lambda: backend.hung)
    seen = len(sink.of(1))
    await yields(100)
    assert len(sink.of(1)) == seen == 5
    assert backend.healthy() and backend.load().ready and backend.load().running == 1
    await backend.stop()
    assert sink.of(1)[-1].finish == Finish.ABORT


async def test_crash_fault_exits_and_a_dead_loop_is_unhealthy() -> None:
    codes: list[int] = []

    def fake_exit(code: int) -> None:
        codes.append(code)
        raise RuntimeError("exited")

    config = SimConfig(eos_every=0, faults=SimFaults(crash_after_tokens=4))
    backend, _sink = await start(config, exit_fn=fake_exit)
    backend.submit(req(1, max_tokens=100))
    await until(lambda: bool(codes))
    await yields(2)
    assert codes == [17]
    assert not backend.healthy() and not backend.load().ready
    await backend.stop()  # does not raise
    assert not backend.healthy()


async def test_slow_tokens_pace_the_loop() -> None:
    backend, sink = await start(SimConfig(eos_every=0, faults=SimFaults(slow_token_s=0.01)))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    backend.submit(req(1, max_tokens=5))
    await until(lambda: sink.finished(1), max_yields=10**7)
    assert loop.time() - t0 >= 0.035  # 4 paced gaps between 5 steps
    await backend.stop()


async def test_a_first_step_delay_holds_the_first_step_only() -> None:
    cold, sink = await start(SimConfig(eos_every=0, first_step_delay_s=3600.0))
    cold.submit(req(1, max_tokens=3))
    await yields(200)
    load = cold.load()
    assert not sink.calls and load.steps == 0 and load.waiting == 1  # still in its first step
    await cold.stop()
    assert sink.of(1)[-1].finish == Finish.ABORT
    warm, sink = await start(SimConfig(eos_every=0, first_step_delay_s=0.001))
    warm.submit(req(1, max_tokens=3))
    await until(lambda: sink.finished(1), max_yields=10**7)
    steps = warm.load().steps
    warm.submit(req(2, max_tokens=3))  # then it runs as usual
    await until(lambda: sink.finished(2))
    assert warm.load().steps == steps + 3
    await warm.stop()


async def test_start_twice_is_refused() -> None:
    backend, _sink = await start(SimConfig())
    with pytest.raises(RuntimeError):
        await backend.start(Sink())
    await backend.stop()
