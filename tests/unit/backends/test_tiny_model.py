from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine_sidecar.backends import tiny_model
from tests.engines import require


def test_builds_once_and_reuses(tmp_path: Path) -> None:
    require("tokenizers")
    target = tmp_path / "tiny"
    assert tiny_model.ensure_tiny_model(target) == target
    config = json.loads((target / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["vocab_size"] == tiny_model.VOCAB_SIZE
    stamp = (target / "tokenizer.json").stat().st_mtime_ns
    assert tiny_model.ensure_tiny_model(target) == target
    assert (target / "tokenizer.json").stat().st_mtime_ns == stamp
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no leftovers


def test_a_stale_build_is_replaced(tmp_path: Path) -> None:
    require("tokenizers")
    target = tmp_path / "tiny"
    tiny_model.ensure_tiny_model(target)
    (target / ".shardgate-tiny-model").write_text("0\n")
    tiny_model.ensure_tiny_model(target)
    assert (target / ".shardgate-tiny-model").read_text().strip() == tiny_model._FORMAT


def test_tokenizer_round_trips_any_text_and_has_a_chat_template(tiny_model_dir: Path) -> None:
    require("transformers")
    from engine_sidecar.backend import ChatMessage
    from engine_sidecar.backends.common.tokenizer import HfTokenizer

    tok = HfTokenizer.from_pretrained(str(tiny_model_dir))
    assert tok.vocab_size == tiny_model.VOCAB_SIZE
    assert tok.eos_token_id == 2
    text = "Hello, wörld! Shards: 42 ☃"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    chat = tok.chat_text([ChatMessage("user", "Hi")])
    assert chat == "<|user|>\nHi\n<|assistant|>\n"


def test_default_cache_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert tiny_model.default_cache_dir() == tmp_path / "shardgate" / "models" / "tiny-llama"
