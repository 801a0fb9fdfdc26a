"""A tiny random-weight Llama for laptops and tests: a config.json and a locally trained tokenizer.

No weights are written: the engine loads it with `load_format="dummy"` (random weights), so the
whole model is a few kilobytes of JSON, built in about a second with the `tokenizers` package
(a dependency of vLLM) and no network. `ensure_tiny_model(path)` builds it once; later calls
return the existing directory.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from engine_sidecar.backends.sim.tokenizer import WORDS

TINY_MODEL_NAME = "tiny-llama"
VOCAB_SIZE = 1024
MAX_POSITIONS = 2048
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
BOS, EOS = "<s>", "</s>"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# Bumped whenever what `build_tiny_model` writes changes, so stale caches are rebuilt.
_FORMAT = "1"
_MARKER = ".shardgate-tiny-model"


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "shardgate" / "models" / TINY_MODEL_NAME


def llama_config() -> dict[str, Any]:
    """Two layers, four heads of 64 (a head size every attention backend supports)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": SPECIAL_TOKENS.index(BOS),
        "eos_token_id": SPECIAL_TOKENS.index(EOS),
        "torch_dtype": "float32",
    }


def _corpus() -> list[str]:
    """Training text: plain English words, chat markers, digits and punctuation."""
    words = " ".join(WORDS)
    lines = [words, words.title(), "<|system|> <|user|> <|assistant|>", "0123456789"]
    lines.append(".,;:!?'\"()[]{}<>/\\|-_+=*&^%$#@~` \n\t")
    return lines * 4


def train_tokenizer() -> Any:
    """A byte-level BPE tokenizer: every string encodes, ids are stable for one corpus."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return tok


def build_tiny_model(path: Path) -> None:
    """Write the model directory (config, tokenizer, chat template) at `path`."""
    path.mkdir(parents=True, exist_ok=True)
    train_tokenizer().save(str(path / "tokenizer.json"))
    files: dict[str, Any] = {
        "config.json": llama_config(),
        "generation_config.json": {
            "bos_token_id": SPECIAL_TOKENS.index(BOS),
            "eos_token_id": SPECIAL_TOKENS.index(EOS),
        },
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": BOS,
            "eos_token": EOS,
            "unk_token": "<unk>",
            "add_bos_token": False,
            "model_max_length": MAX_POSITIONS,
            "chat_template": CHAT_TEMPLATE,
        },
        "special_tokens_map.json": {"bos_token": BOS, "eos_token": EOS, "unk_token": "<unk>"},
    }
    for name, data in files.items():
        (path / name).write_text(json.dumps(data, indent=2) + "\n")
    (path / _MARKER).write_text(_FORMAT + "\n")


def ensure_tiny_model(path: Path | None = None) -> Path:
    """The tiny model's directory, built there first if it is absent or stale."""
    target = path or default_cache_dir()
    marker = target / _MARKER
    if marker.is_file() and marker.read_text().strip() == _FORMAT:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target, then rename: a concurrent builder never sees half a model.
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    build_tiny_model(tmp)
    try:
        tmp.rename(target)
    except OSError:
        # Another process won the race (or a stale copy is there): keep one complete copy.
        if not (marker.is_file() and marker.read_text().strip() == _FORMAT):
            _replace(tmp, target)
    finally:
        if tmp.exists():
            _remove(tmp)
    return target


def _replace(new: Path, target: Path) -> None:
    old = target.with_name(f".{target.name}-old-{os.getpid()}")
    target.rename(old)
    new.rename(target)
    _remove(old)


def _remove(path: Path) -> None:
    for child in path.iterdir():
        child.unlink()
    path.rmdir()
