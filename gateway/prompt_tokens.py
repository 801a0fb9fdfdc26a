"""A request's prompt as token ids, tokenized at the gateway as its engine tokenizes it.

Precise prefix routing names a prompt's KV blocks by their token ids (shardgate/v1/kvblocks.py),
so the gateway needs the ids the engine will compute: the chat template applied, with the
model's own tokenizer. The sidecars name it in their Info (`ModelCard.tokenizer`: "sim", or a
Hugging Face tokenizer's directory or name), or `routing.kv.tokenizers` names it (the gateway's
path to the same files). Tokenizing uses the sidecar's own code (engine_sidecar/backends/common),
so both sides render and encode alike.

A Hugging Face tokenizer loads off the event loop, once per model; until it has loaded (or when
it cannot), `ids` answers None and routing falls back to the approximate prefix scorer. So does
a chat request with `tools` (their rendering is vLLM's own models') or one that names its own
chat template.

Cost is bounded: at most `max_chars` characters of the prompt (or of the rendered conversation)
are encoded; the last ids before the cut may differ from the engine's, so the blocks they end
simply do not match. And a long text is encoded in pieces whose ids are kept: a prefix that
many prompts share is tokenized once (`ChunkedEncoder`, used where it is exact).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from shardgate.v1.params import Generation

from gateway import tasks

log = logging.getLogger(__name__)

SIM = "sim"


class PromptTokens:
    def __init__(self, max_chars: int, overrides: Mapping[str, str] | None = None) -> None:
        self.max_chars = max_chars
        self.overrides = dict(overrides or {})
        self._named: dict[str, str] = {}  # model -> tokenizer spec in use
        self._loaded: dict[str, ChunkedEncoder] = {}  # spec -> (SimTokenizer or HfTokenizer)
        self._failed: set[str] = set()
        self._loading: dict[str, asyncio.Task[None]] = {}

    def named(self, model: str, spec: str) -> None:
        """A sidecar named `spec` as `model`'s tokenizer: load it (once) unless configured."""
        if spec:
            self._named[model] = spec
        spec = self.overrides.get(model) or spec
        if spec:
            self._load(spec)

    def spec(self, model: str) -> str | None:
        """The tokenizer `model`'s prompts are tokenized with (configured, else named)."""
        return self.overrides.get(model) or self._named.get(model)

    def ready(self, model: str) -> bool:
        spec = self.spec(model)
        return spec is not None and spec in self._loaded

    def ids(self, model: str, g: Generation) -> list[int] | None:
        """The prompt's ids as the engine computes them (up to `max_chars` of its text), or
        None when the gateway cannot say."""
        spec = self.spec(model)
        if spec is None:
            return None
        tok = self._loaded.get(spec)
        if tok is None:
            self._load(spec)
            return None
        try:
            return _encode(tok, g, self.max_chars)
        except Exception:  # (a prompt the engine refuses too: it says why)
            return None

    async def close(self) -> None:
        await tasks.stop_all(list(self._loading.values()))

    def _load(self, spec: str) -> None:
        if spec in self._loaded or spec in self._failed or spec in self._loading:
            return
        if spec == SIM:
            from engine_sidecar.backends.sim.tokenizer import SimTokenizer

            self._loaded[spec] = ChunkedEncoder(SimTokenizer())
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # (no loop: a test or a tool; load here)
            try:
                self._loaded[spec] = _load_hf(spec)
            except Exception as e:
                self._cannot_load(spec, e)
            return
        task = asyncio.create_task(self._load_off_loop(spec), name=f"tokenizer-{spec}")
        self._loading[spec] = task

    async def _load_off_loop(self, spec: str) -> None:
        try:
            self._loaded[spec] = await asyncio.to_thread(_load_hf, spec)
            log.info("tokenizer %s loaded for precise prefix routing", spec)
        except Exception as e:
            self._cannot_load(spec, e)
        finally:
            self._loading.pop(spec, None)

    def _cannot_load(self, spec: str, e: Exception) -> None:
        self._failed.add(spec)
        log.warning(
            "tokenizer %s could not be loaded (%s): prompts of its models are routed on the "
            "approximate prefix index; routing.kv.tokenizers can name a local copy",
            spec,
            str(e) or type(e).__name__,
        )


def _load_hf(spec: str) -> ChunkedEncoder:
    from engine_sidecar.backends.common.tokenizer import HfTokenizer

    return ChunkedEncoder(HfTokenizer.from_pretrained(spec))


def _encode(tok: ChunkedEncoder, g: Generation, max_chars: int) -> list[int] | None:
    from engine_sidecar.backends.common.tokenizer import HfTokenizer

    if g.sampling.truncate_prompt_tokens is not None:
        return None  # (the engine keeps some of the prompt only)
    if g.prompt_token_ids is not None:
        return list(g.prompt_token_ids)
    add = g.add_special_tokens
    if g.messages is not None:
        if g.tools is not None or (g.template is not None and g.template.chat_template):
            return None
        if isinstance(tok.tokenizer, HfTokenizer):
            text = tok.tokenizer.chat_text(g.messages, None, g.template)
        else:
            text = tok.tokenizer.apply_chat_template(g.messages)
        return tok.encode(text[:max_chars], bool(add))
    if g.prompt is not None:
        return tok.encode(g.prompt[:max_chars], add is not False)
    return None


CHUNK_CHARS = 1024


def chunks(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """`text` cut into pieces of about `size` characters, each cut just before a space that
    follows a non-space and precedes one (where word-level tokenizers start a new token): the
    same text always cuts at the same places, so a shared prefix gives the same leading pieces."""
    out = []
    begin = 0
    n = len(text)
    while n - begin > size:
        cut = text.find(" ", begin + size)
        while cut != -1 and (text[cut - 1].isspace() or cut + 1 >= n or text[cut + 1].isspace()):
            cut = text.find(" ", cut + 1)
        if cut == -1:
            break
        out.append(text[begin:cut])
        begin = cut
    out.append(text[begin:])
    return out


class ChunkedEncoder:
    """Encodes a long text piece by piece (`chunks`), keeping the ids of the pieces it has
    seen (a bounded LRU): the prompts that share a long prefix (what precise routing is for)
    pay its tokenization once. Used only where a self-check shows piecewise encoding equals
    whole encoding for this tokenizer; otherwise every text is encoded whole."""

    def __init__(self, tokenizer: Any, max_pieces: int = 4096) -> None:
        self.tokenizer = tokenizer
        self.max_pieces = max_pieces
        self._pieces: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self.piecewise = self._agrees()

    def encode(self, text: str, add_special_tokens: bool) -> list[int]:
        tok = self.tokenizer
        if not self.piecewise or len(text) <= CHUNK_CHARS:
            return list(tok.encode(text, add_special_tokens=add_special_tokens))
        parts = chunks(text)
        ids = list(tok.encode(parts[0], add_special_tokens=add_special_tokens))
        cache = self._pieces
        for part in parts[1:]:
            got = cache.get(part)
            if got is None:
                got = cache[part] = tuple(tok.encode(part, add_special_tokens=False))
                if len(cache) > self.max_pieces:
                    cache.popitem(last=False)
            else:
                cache.move_to_end(part)
            ids.extend(got)
        return ids

    def _agrees(self) -> bool:
        sample = " ".join(
            f"{w}{i % 7}, the river's {w}s ran north: {i * 37} miles."
            for i, w in enumerate(["stone", "water", "bridge", "mill", "tower", "field"] * 60)
        )
        tok = self.tokenizer
        try:
            for special in (False, True):  # (special tokens with the first piece only)
                whole = list(tok.encode(sample, add_special_tokens=special))
                pieces = chunks(sample, 200)
                parts = list(tok.encode(pieces[0], add_special_tokens=special))
                for part in pieces[1:]:
                    parts.extend(tok.encode(part, add_special_tokens=False))
                if parts != whole:
                    return False
        except Exception:
            return False
        return True
