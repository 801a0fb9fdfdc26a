"""The optional sampling fields each Triton convention announces reach Triton, as the model's
own parameters; the others are refused by name. Against the fake KServe v2 server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from engine_sidecar.backend import RequestError
from engine_sidecar.backends.triton.trtllm_convention import CAPABILITIES as TRTLLM
from engine_sidecar.backends.triton.vllm_convention import CAPABILITIES as VLLM
from tests.contract.conftest import triton_backend
from tests.contract.harness import Caps, Harness

pytestmark = pytest.mark.timeout(120)

# A value other than its default for each optional field.
ASKED: dict[str, Any] = {
    "presence_penalty": 0.5,
    "frequency_penalty": 0.25,
    "repetition_penalty": 1.5,
    "min_p": 0.1,
    "logit_bias": {7: 2.5},
    "stop_token_ids": (9,),
    "include_stop_str_in_output": True,
    "min_tokens": 2,
    "skip_special_tokens": False,
    "spaces_between_special_tokens": False,
    "bad_words": ("no",),
    "allowed_token_ids": (7, 8, 9),
    "logprobs": 2,
    "prompt_logprobs": 1,
    "logprob_token_ids": (7, 8),
    "truncate_prompt_tokens": 3,
    "truncation_side": "left",
}


async def started(server: Any, convention: str, tiny_dir: Path) -> AsyncIterator[Harness]:
    backend = triton_backend(server, convention, tiny_dir)
    h = Harness(f"triton-{convention}", backend, "tiny-triton", Caps(), server=server)
    await backend.start(h.collector.sink)
    try:
        yield h
    finally:
        await backend.stop()


@pytest_asyncio.fixture
async def vllm(fake_triton: Any, tiny_model_dir: Path) -> AsyncIterator[Harness]:
    async for h in started(fake_triton, "vllm", tiny_model_dir):
        yield h


@pytest_asyncio.fixture
async def trtllm(fake_triton: Any, tiny_model_dir: Path) -> AsyncIterator[Harness]:
    async for h in started(fake_triton, "trtllm", tiny_model_dir):
        yield h


def inputs(h: Harness, key: int) -> dict[str, Any]:
    request = next(r for r in h.server.received if r.id == f"contract-{key}")
    return {t.name: t for t in request.inputs}


def test_every_optional_field_is_covered() -> None:
    from shardgate.v1.params import OPTIONAL

    assert set(OPTIONAL) - {"structured"} == set(ASKED)


async def test_the_vllm_convention_announces_and_sends_its_fields(vllm: Harness) -> None:
    assert vllm.backend.info().capabilities == VLLM
    assert "logprobs" not in VLLM  # Triton's vLLM backend answers text only
    fields = {k: v for k, v in ASKED.items() if k in VLLM}
    key = vllm.submit(max_tokens=4, sampling=fields, resume_token_ids=())
    await vllm.collector.finished(key)
    sent = json.loads(inputs(vllm, key)["sampling_parameters"].contents.bytes_contents[0])
    expected = json.loads(json.dumps(fields))  # (JSON: tuples as lists, keys as strings)
    assert {k: sent.get(k) for k in fields} == expected


async def test_the_trtllm_convention_maps_its_fields(trtllm: Harness) -> None:
    assert trtllm.backend.info().capabilities == TRTLLM
    fields = {k: v for k, v in ASKED.items() if k in TRTLLM}
    assert set(fields) == TRTLLM
    key = trtllm.submit(max_tokens=4, sampling=fields)
    await trtllm.collector.finished(key)
    got = inputs(trtllm, key)
    scalars = {
        name: got[name].contents.fp32_contents[0]
        for name in ("presence_penalty", "frequency_penalty", "repetition_penalty")
    }
    assert scalars == {
        "presence_penalty": 0.5,
        "frequency_penalty": 0.25,
        "repetition_penalty": 1.5,
    }
    assert got["min_length"].contents.int_contents == [2]
    bias = got["embedding_bias"]
    vocab = len(bias.contents.fp32_contents)
    assert list(bias.shape) == [1, vocab] and vocab > 7
    assert {i: b for i, b in enumerate(bias.contents.fp32_contents) if b} == {7: 2.5}


async def test_trtllm_min_tokens_count_what_an_earlier_run_generated(trtllm: Harness) -> None:
    full = await trtllm.run(max_tokens=6)
    ids = tuple(t for d in full for t in d.token_ids)
    key = trtllm.submit(max_tokens=6, sampling={"min_tokens": 5}, resume_token_ids=ids[:3])
    await trtllm.collector.finished(key)
    assert inputs(trtllm, key)["min_length"].contents.int_contents == [2]


@pytest.mark.parametrize("name", sorted(set(ASKED) - VLLM))
async def test_the_vllm_convention_refuses_what_it_does_not_send(vllm: Harness, name: str) -> None:
    with pytest.raises(RequestError) as e:
        vllm.submit(max_tokens=4, sampling={name: ASKED[name]})
    assert e.value.field == name


@pytest.mark.parametrize("name", sorted(set(ASKED) - TRTLLM))
async def test_the_trtllm_convention_refuses_what_it_does_not_map(
    trtllm: Harness, name: str
) -> None:
    with pytest.raises(RequestError) as e:
        trtllm.submit(max_tokens=4, sampling={name: ASKED[name]})
    assert e.value.field == name


async def test_trtllm_logit_bias_outside_the_vocabulary_is_refused(trtllm: Harness) -> None:
    with pytest.raises(RequestError) as e:
        trtllm.submit(max_tokens=4, sampling={"logit_bias": {10**6: 1.0}})
    assert e.value.field == "logit_bias"
