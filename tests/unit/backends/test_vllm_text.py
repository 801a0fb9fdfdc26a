"""The sidecar's own text for vLLM requests resumed at any cut, stop strings included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from shardgate.v1.params import Sampling

from tests.engines import require

TEXT = " Grüße aus dem ☃-Land, café; 1234 shards 𝄞 ok; done"


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path) -> Any:
    require("transformers")
    from engine_sidecar.backends.common.tokenizer import HfTokenizer

    return HfTokenizer.from_pretrained(str(tiny_model_dir))


def _run(text: Any, ids: list[int]) -> tuple[list[int], str, bool]:
    """Feed ids one at a time (the last as the finished output) until a stop string."""
    kept: list[int] = []
    parts: list[str] = []
    for i, t in enumerate(ids):
        k, piece, stopped = text.add([t], i == len(ids) - 1)
        kept += k
        parts.append(piece)
        if stopped:
            return kept, "".join(parts), True
    return kept, "".join(parts), False


def test_only_resumed_requests_and_split_prompts_need_it(tok: Any) -> None:
    from engine_sidecar.backends.vllm.text import own_text

    ids = tok.encode(TEXT, add_special_tokens=False)
    split = next(k for k in range(1, len(ids)) if tok.decode(ids[:k]).endswith("\ufffd"))
    none = Sampling(max_tokens=8)
    assert own_text(tok, ids[:4], (), none) is None
    assert own_text(tok, ids[:split], (), none) is not None
    assert own_text(tok, ids[:4], ids[4:5], none) is not None


@pytest.mark.parametrize(
    ("stops", "include", "min_tokens"),
    [
        ((), False, 0),
        ((";",), False, 0),
        (("☃-L", "shards 𝄞"), False, 0),
        ((";",), True, 0),
        (("☃-L", "shards 𝄞"), True, 0),
        ((";", "a"), False, 12),  # no stop string completes within the first 12 tokens
        ((";", "a"), True, 12),
    ],
)
def test_resumed_at_any_cut_the_text_goes_on_as_one_run(
    tok: Any, stops: tuple[str, ...], include: bool, min_tokens: int
) -> None:
    from engine_sidecar.backends.vllm.text import OwnText

    s = Sampling(
        max_tokens=64, stop=stops, include_stop_str_in_output=include, min_tokens=min_tokens
    )
    prompt = tok.encode("Say:", add_special_tokens=False)
    ids = tok.encode(TEXT, add_special_tokens=False)
    full_ids, full_text, full_stopped = _run(OwnText(tok, prompt, [], s), ids)
    assert full_stopped == bool(stops)
    if not stops:
        assert full_text == TEXT
    else:
        first = min(i for i in (TEXT.find(x) for x in stops) if i != -1)
        assert any(full_text.endswith(x) for x in stops) == include
        # min_tokens: the first stop string did not end it.
        assert (len(full_text) > first + max(map(len, stops))) == (min_tokens > 0)
    for cut in range(len(full_ids)):
        # The first run, cut there: what it held back (for a character, for a stop) was not sent.
        first_run = OwnText(tok, prompt, [], s)
        sent = "".join(first_run.add([t], False)[1] for t in full_ids[:cut])
        kept, rest, stopped = _run(OwnText(tok, prompt, full_ids[:cut], s), ids[cut:])
        assert full_ids[:cut] + kept == full_ids, cut
        assert sent + rest == full_text, cut
        assert stopped == full_stopped


@pytest.mark.parametrize("skip", [True, False])
def test_special_tokens_are_kept_or_skipped_at_any_cut(tok: Any, skip: bool) -> None:
    from engine_sidecar.backends.vllm.text import own_text

    s = Sampling(max_tokens=64, skip_special_tokens=skip)
    decoding = tok if skip else tok.keeping_special_tokens()
    prompt = tok.encode("Say:", add_special_tokens=False)
    words = tok.encode(" shards ok", add_special_tokens=False)
    ids = [*words, 1, *words, 2, *words]  # the start- and end-of-text tokens among them
    whole = decoding.decode(ids)
    assert ("<s>" in whole and "</s>" in whole) == (not skip)
    for cut in range(1, len(ids)):
        run = own_text(tok, prompt, ids[:cut], s)
        assert run is not None
        assert decoding.decode(ids[:cut]) + _run(run, ids[cut:])[1] == whole, cut
