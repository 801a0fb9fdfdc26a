from __future__ import annotations

from pathlib import Path

from tests.engines import require


def test_streamed_text_equals_the_whole_decode(tiny_model_dir: Path) -> None:
    require("transformers")
    from engine_sidecar.backends.common.detokenizer import IncrementalDetokenizer
    from engine_sidecar.backends.common.tokenizer import HfTokenizer

    tok = HfTokenizer.from_pretrained(str(tiny_model_dir))
    prompt = tok.encode("The answer:", add_special_tokens=False)
    text = " Grüße aus dem ☃-Land, 1234 shards" * 8
    ids = tok.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(tok, prompt)
    pieces = [detok.add([t]) for t in ids]
    assert "".join(pieces) == text
    assert any(p == "" for p in pieces)  # a multi-byte character waits for its last byte
