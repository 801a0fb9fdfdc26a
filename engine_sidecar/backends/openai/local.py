"""What the sidecar does itself in front of a vLLM server, with vLLM installed on its machine and
the model's tokenizer: it parses chat answers with vLLM's own tool and reasoning parsers (the
vllm backend's tools.py), and decodes the tokens of logprobs as vLLM's detokenizer does (the
vllm backend's logprobs.py). A request that needs either runs on the server as token ids
(/v1/completions), so it goes on exactly when it resumes: its parser is primed with the tokens
so far, as the vllm backend's is.

Without vLLM or a tokenizer there is no `Local`: tools and logprobs are then not announced, and
refused by name.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from shardgate.v1.params import Generation

from engine_sidecar.backend import ErrorCode, RequestError
from engine_sidecar.backends.common.detokenizer import IncrementalDetokenizer
from engine_sidecar.backends.common.tokenizer import HfTokenizer
from engine_sidecar.backends.openai.config import OpenAIConfig

if TYPE_CHECKING:
    from engine_sidecar.backends.vllm.tools import ChatParse, ChatParsers

log = logging.getLogger(__name__)


class Local:
    def __init__(self, tokenizer: HfTokenizer, parsers: ChatParsers, reasoning: bool) -> None:
        self.tokenizer = tokenizer
        self.parsers = parsers
        self.reasoning = reasoning

    def begin(self, g: Generation) -> ChatParse | None:
        """The parse of a chat answer (None: its answer is its text); raises RequestError on a
        tool choice no parser serves, as vLLM's server refuses it."""
        return self.parsers.begin(g)

    def token_texts(self, sampled_so_far: Sequence[int]) -> Any:
        """The decoder of one request's logprobs' tokens (vllm/logprobs.py TokenTexts)."""
        from engine_sidecar.backends.vllm.logprobs import TokenTexts

        return TokenTexts(self.tokenizer.raw, sampled_so_far)

    def start_parse(
        self, chat: ChatParse, prompt: Sequence[int], resumed: Sequence[int], skip: bool
    ) -> None:
        """The parse starts after the prompt and the tokens resumed, each with its text (as the
        vllm backend's _start_parse)."""
        tokenizer = self.tokenizer
        if chat.request.skip_special_tokens is False or not skip:
            tokenizer = tokenizer.keeping_special_tokens()
        detok = IncrementalDetokenizer(tokenizer, prompt)
        chat.start(prompt, [(detok.add((t,)), t) for t in resumed])


def structured_outputs(chat: ChatParse) -> dict[str, Any] | None:
    """The grammar a tool choice puts on the output (vLLM's StructuredOutputsParams), as the
    server's `structured_outputs` takes it: each field not at its default, under its name."""
    so = chat.structured_outputs
    if so is None:
        return None
    out: dict[str, Any] = {}
    for f in dataclasses.fields(so):
        value = getattr(so, f.name)
        if f.init and not f.name.startswith("_") and value != f.default:
            out[f.name] = value
    return out or None


def make_local(
    config: OpenAIConfig, tokenizer: HfTokenizer | None, sidecar: str = ""
) -> Local | None:
    if tokenizer is None:
        return None
    if importlib.util.find_spec("vllm") is None:
        log.info("vLLM is not installed here: no tool calls and no logprobs through the server")
        return None
    from engine_sidecar.backends.vllm.config import VllmConfig
    from engine_sidecar.backends.vllm.tools import ChatParsers

    c = config
    parsers_config = VllmConfig(
        model=c.model,
        enable_auto_tool_choice=c.enable_auto_tool_choice,
        tool_call_parser=c.tool_call_parser,
        tool_parser_plugin=c.tool_parser_plugin,
        reasoning_parser=c.reasoning_parser,
    )
    try:
        parsers = ChatParsers(
            parsers_config, tokenizer.raw, None, section="openai", sidecar=sidecar
        )
    except (KeyError, ValueError, TypeError, ImportError) as e:
        raise RuntimeError(f"openai.tool_call_parser / reasoning_parser: {e}") from e
    return Local(tokenizer, parsers, parsers.reasoning)


def refuse_unserved(g: Generation, local: Local | None, logprobs: bool) -> None:
    """A request for tools or logprobs the backend cannot give is refused by name (the gateway
    refuses it first, from the capabilities)."""
    if g.tools is not None and local is None:
        raise RequestError(
            ErrorCode.INVALID_ARGUMENT, "tools are not supported by this engine", "tools"
        )
    if g.template is not None and g.template.documents:
        raise RequestError(
            ErrorCode.INVALID_ARGUMENT, "documents are not supported by this engine", "documents"
        )
    if g.sampling.logprobs is not None and not logprobs:
        raise RequestError(
            ErrorCode.INVALID_ARGUMENT, "logprobs are not supported by this engine", "logprobs"
        )
