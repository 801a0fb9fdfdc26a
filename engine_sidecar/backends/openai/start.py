"""What the backend asks of its server at start: its model (/v1/models), whether it takes vLLM's
`return_token_ids` and `return_tokens_as_token_ids` (a probe each), and a tokenizer for the
model when one is at hand."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from engine_sidecar.backends.common.tokenizer import HfTokenizer
from engine_sidecar.backends.openai.client import EngineClient, ServerRefused
from engine_sidecar.backends.openai.config import OpenAIConfig
from engine_sidecar.backends.openai.logprobs import token_id
from engine_sidecar.backends.tiny_model import TINY_MODEL_NAME, ensure_tiny_model

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServedModel:
    max_model_len: int | None
    root: str | None  # where the server loaded it from


async def served_model(client: EngineClient, model: str) -> ServedModel:
    """Raises RuntimeError when the server does not serve `model`."""
    data = json.loads(await client.get("/v1/models"))
    cards = data.get("data", []) if isinstance(data, dict) else []
    for card in cards:
        if isinstance(card, dict) and card.get("id") == model:
            max_len = card.get("max_model_len")
            root = card.get("root")
            return ServedModel(
                int(max_len) if isinstance(max_len, int) else None,
                root if isinstance(root, str) else None,
            )
    names = [c.get("id") for c in cards if isinstance(c, dict)]
    raise RuntimeError(f"the engine server does not serve {model!r} (it serves {names})")


async def takes_token_ids(client: EngineClient, model: str, timeout_s: float) -> bool:
    """One tiny greedy completion with `return_token_ids`: do token ids come back? (A probe is
    a completion: `timeout_s` is a first token's, which a cold or busy engine can take far
    longer than an RPC to give.)"""
    body = {"model": model, "prompt": "Hi", "max_tokens": 1, "temperature": 0.0}
    body["return_token_ids"] = True
    try:
        answer = await client.post("/v1/completions", body, timeout_s)
    except ServerRefused as e:
        log.info("the engine server refuses return_token_ids (%s): text only", e.message)
        return False
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
        raise RuntimeError(f"the engine server failed a probe completion: {e}") from e
    choices = answer.get("choices") if isinstance(answer, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else {}
    return isinstance(first, dict) and isinstance(first.get("token_ids"), list)


async def takes_logprob_ids(client: EngineClient, model: str, timeout_s: float) -> bool:
    """One tiny greedy completion with logprobs as token ids: do they come back so?"""
    body: dict[str, Any] = {"model": model, "prompt": "Hi", "max_tokens": 1, "temperature": 0.0}
    body.update(logprobs=1, return_tokens_as_token_ids=True)
    try:
        answer = await client.post("/v1/completions", body, timeout_s)
    except ServerRefused as e:
        log.info("the engine server refuses logprobs as token ids (%s): none", e.message)
        return False
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
        raise RuntimeError(f"the engine server failed a probe completion: {e}") from e
    try:
        lp = answer["choices"][0]["logprobs"]
        token_id(lp["tokens"][0])
        return all(token_id(t) >= 0 for t in lp["top_logprobs"][0])
    except (KeyError, IndexError, TypeError, ValueError):
        log.info("the engine server's logprobs are not token ids: none")
        return False


def tokenizer_source(config: OpenAIConfig, root: str | None) -> str | None:
    if config.tokenizer == TINY_MODEL_NAME:
        where = Path(config.tiny_model_dir).expanduser() if config.tiny_model_dir else None
        return str(ensure_tiny_model(where))
    if config.tokenizer:
        return config.tokenizer
    if root and Path(root).is_dir():
        return root
    return None


def load_tokenizer(config: OpenAIConfig, root: str | None) -> HfTokenizer | None:
    source = tokenizer_source(config, root)
    return HfTokenizer.from_pretrained(source) if source else None
