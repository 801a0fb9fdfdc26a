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
simply do not match.
"""

from __future__ import annotations

import asyncio
import logging
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
        self._loaded: dict[str, Any] = {}  # spec -> tokenizer (SimTokenizer or HfTokenizer)
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

            self._loaded[spec] = SimTokenizer()
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


def _load_hf(spec: str) -> Any:
    from engine_sidecar.backends.common.tokenizer import HfTokenizer

    return HfTokenizer.from_pretrained(spec)


def _encode(tok: Any, g: Generation, max_chars: int) -> list[int] | None:
    from engine_sidecar.backends.common.tokenizer import HfTokenizer

    if g.sampling.truncate_prompt_tokens is not None:
        return None  # (the engine keeps some of the prompt only)
    if g.prompt_token_ids is not None:
        return list(g.prompt_token_ids)
    add = g.add_special_tokens
    if g.messages is not None:
        if g.tools is not None or (g.template is not None and g.template.chat_template):
            return None
        if isinstance(tok, HfTokenizer):
            text = tok.chat_text(g.messages, None, g.template)
        else:
            text = tok.apply_chat_template(g.messages)
        return list(tok.encode(text[:max_chars], add_special_tokens=bool(add)))
    if g.prompt is not None:
        return list(tok.encode(g.prompt[:max_chars], add_special_tokens=add is not False))
    return None
