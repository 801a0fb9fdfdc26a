from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.engines import require

TEXT = " Grüße aus dem ☃-Land, café 1234 shards 𝄞 ok"


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path) -> Any:
    require("transformers")
    from engine_sidecar.backends.common.tokenizer import HfTokenizer

    return HfTokenizer.from_pretrained(str(tiny_model_dir))


def _stream(tok: Any, context: list[int], ids: list[int]) -> list[str]:
    from engine_sidecar.backends.common.detokenizer import IncrementalDetokenizer

    detok = IncrementalDetokenizer(tok, context)
    return [detok.add([t]) for t in ids]


def test_streamed_text_equals_the_whole_decode(tok: Any) -> None:
    prompt = tok.encode("The answer:", add_special_tokens=False)
    text = TEXT * 8
    pieces = _stream(tok, prompt, tok.encode(text, add_special_tokens=False))
    assert "".join(pieces) == text
    assert any(p == "" for p in pieces)  # a multi-byte character waits for its last byte


def test_a_detokenizer_primed_at_any_cut_continues_the_text(tok: Any) -> None:
    from engine_sidecar.backends.common.detokenizer import whole_text

    prompt = tok.encode("The answer:", add_special_tokens=False)
    ids = tok.encode(TEXT, add_special_tokens=False)
    pieces = _stream(tok, prompt, ids)
    splits = 0
    for cut in range(len(ids) + 1):
        sent = "".join(pieces[:cut])
        splits += tok.decode(ids[:cut]).endswith("\ufffd")
        # Primed with prompt + the tokens before the cut (a resumed request), it emits the
        # held-back bytes' character with the next tokens, and only the new text.
        assert sent + "".join(_stream(tok, prompt + ids[:cut], ids[cut:])) == TEXT, cut
        assert whole_text(tok, ids[:cut]) == sent, cut
    assert splits >= 5  # ü, ß, ☃, é and 𝄞 each straddle a cut


def test_tokens_added_together_emit_the_whole_characters_among_them(tok: Any) -> None:
    """What has been emitted depends on the ids only, not on how they were grouped."""
    from engine_sidecar.backends.common.detokenizer import IncrementalDetokenizer

    prompt = tok.encode("The answer:", add_special_tokens=False)
    ids = tok.encode(TEXT, add_special_tokens=False)
    one_by_one = _stream(tok, prompt, ids)
    for size in (2, 3, 5):
        detok = IncrementalDetokenizer(tok, prompt)
        for start in range(0, len(ids), size):
            end = min(start + size, len(ids))
            assert detok.add(ids[start:end]) == "".join(one_by_one[start:end]), (size, start)


def test_a_prompt_that_ends_inside_a_character_is_completed_by_the_output(tok: Any) -> None:
    from engine_sidecar.backends.common.detokenizer import IncrementalDetokenizer

    ids = tok.encode(" café", add_special_tokens=False)
    detok = IncrementalDetokenizer(tok, ids[:-1])
    assert detok.held == 1
    assert detok.add(ids[-1:]) == " café"[len(tok.decode(ids[:-2])) :]
    assert detok.held == 0
