"""Validation and resume arithmetic shared by the vLLM and TensorRT-LLM paths."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from engine_sidecar.backend import ChatMessage, EngineRequest, ErrorCode, RequestError, Sampling
from engine_sidecar.backends.common.prompts import Limits, prepare
from engine_sidecar.backends.common.tokenizer import HfTokenizer
from tests.requests import engine_request


class WordTokenizer:
    """One id per word; 100 ids."""

    eos_token_id = 2

    def __len__(self) -> int:
        return 100

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [10 + len(w) for w in text.split()]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return " ".join("w" * (i - 10) for i in ids)

    def apply_chat_template(self, conversation: Any, **kw: Any) -> str:
        return " ".join(f"{m['role']}: {m['content']}" for m in conversation) + " assistant:"


TOK = HfTokenizer(WordTokenizer())
LIMITS = Limits("m", max_model_len=20, loras=frozenset({"a"}))


def req(**kw: Any) -> EngineRequest:
    sampling = Sampling(max_tokens=kw.pop("max_tokens", 5), temperature=kw.pop("temperature", 0.0))
    if not {"prompt", "messages", "prompt_token_ids"} & kw.keys():
        kw["prompt"] = "one two three"
    return engine_request(1, request_id="r", model=kw.pop("model", "m"), sampling=sampling, **kw)


def test_resume_appends_tokens_and_reduces_max_tokens() -> None:
    p = prepare(req(max_tokens=5, resume_token_ids=(11, 12)), LIMITS, TOK)
    assert p.prompt_ids == [13, 13, 15]
    assert p.engine_ids == [13, 13, 15, 11, 12]
    assert (p.max_tokens, p.resumed) == (3, 2)


def test_chat_messages_use_the_template() -> None:
    p = prepare(req(messages=(ChatMessage("user", "hi"),)), LIMITS, TOK)
    assert p.prompt_ids == TOK.encode("user: hi assistant:", add_special_tokens=False)


@pytest.mark.parametrize(
    ("kwargs", "code", "field"),
    [
        ({"model": "x"}, ErrorCode.NOT_FOUND, "model"),
        ({"lora": "b"}, ErrorCode.NOT_FOUND, "lora"),
        ({"prompt": ""}, ErrorCode.INVALID_ARGUMENT, "prompt"),
        ({"prompt_token_ids": (5, 100)}, ErrorCode.INVALID_ARGUMENT, "prompt"),
        ({"temperature": -1.0}, ErrorCode.INVALID_ARGUMENT, "temperature"),
        ({"max_tokens": 18}, ErrorCode.INVALID_ARGUMENT, "max_tokens"),
        ({"prompt": "a " * 21}, ErrorCode.INVALID_ARGUMENT, "prompt"),
        ({"resume_token_ids": (200,)}, ErrorCode.INVALID_ARGUMENT, "resume_token_ids"),
    ],
)
def test_refusals_name_the_field(kwargs: dict[str, Any], code: ErrorCode, field: str) -> None:
    with pytest.raises(RequestError) as e:
        prepare(req(**kwargs), LIMITS, TOK)
    assert (e.value.code, e.value.field) == (code, field)
