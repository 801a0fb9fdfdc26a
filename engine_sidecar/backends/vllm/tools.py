"""Tool calls and reasoning in a chat answer, parsed by vLLM's own parsers as `vllm serve` parses
them (its ParserManager: `tool_call_parser`, `reasoning_parser`).

A chat request with tools (or any chat request, where a reasoning parser is configured) gets a
`ChatParse`: the request as vLLM's OpenAI server holds it, and one parser. A streamed answer is
parsed step by step (`parse_delta`, vLLM's incremental tool parser inside), a whole one at its
end (`parse`), as vLLM's server does each; every delta then carries what the step added
(shardgate/v1/parsed.py). `tool_choice` "required" or a named function constrains the output
with the JSON schema vLLM derives from the tools (the parser's `adjust_request`).

Resume: a resumed request's parser is given the tokens generated so far first, one step per
token with its text, as the earlier run was (its output dropped: it was sent), so it goes on
from the state the earlier run left it in (an incremental parser's state depends on the steps
it saw, not only on the text).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from shardgate.v1 import parsed
from shardgate.v1.params import Generation, Tools

from engine_sidecar.backend import ErrorCode, RequestError
from engine_sidecar.backends.vllm.config import VllmConfig

_BAD = ErrorCode.INVALID_ARGUMENT


def _tool_choice(t: Tools) -> Any:
    if t.choice == "function":
        return {"type": "function", "function": {"name": t.function}}
    return t.choice


def vllm_request(g: Generation) -> Any:
    """The request as vLLM's OpenAI server holds it (what its parsers read)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    body: dict[str, Any] = {
        "model": g.model,
        "messages": [{"role": m.role, "content": m.content} for m in g.messages or ()],
    }
    t = g.tools
    if t is not None:
        body["tools"] = json.loads(t.tools)
        body["tool_choice"] = _tool_choice(t)
        if t.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = t.parallel_tool_calls
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValueError as e:
        raise RequestError(_BAD, f"invalid tools: {e}", "tools") from e


class ChatParsers:
    """The configured parsers (none: answers are text)."""

    def __init__(
        self,
        config: VllmConfig,
        tokenizer: Any,
        model_config: Any,
        *,
        section: str = "vllm",
        sidecar: str = "",
    ) -> None:
        """`section` and `sidecar`: where a user sets the parsers (`openai.tool_call_parser` in
        the config of sidecar `sidecar`), named in the refusals."""
        from vllm.parser import ParserManager
        from vllm.tool_parsers import ToolParserManager

        if config.tool_parser_plugin:
            ToolParserManager.import_tool_parser(config.tool_parser_plugin)
        self.enable_auto_tools = config.enable_auto_tool_choice
        self._where = (
            f"in the config of sidecar {sidecar!r}" if sidecar else "in the sidecar's config"
        )
        self._section = section
        self._tokenizer = tokenizer
        self._model_config = model_config
        self._cls = ParserManager.get_parser(
            tool_parser_name=config.tool_call_parser,
            reasoning_parser_name=config.reasoning_parser,
            enable_auto_tools=config.enable_auto_tool_choice,
            model_name=config.model,
            tokenizer=tokenizer,
        )
        self.reasoning = self._cls is not None and self._cls.reasoning_parser_cls is not None
        self._tool_parser = self._cls is not None and self._cls.tool_parser_cls is not None

    def check(self, g: Generation) -> None:
        """vLLM's refusals of a tool choice that no tool parser serves, naming the config keys
        that would serve it."""
        t = g.tools
        if t is None or t.choice == "none" or self._tool_parser:
            return
        key = f"{self._section}.tool_call_parser"
        if t.choice == "auto":
            raise RequestError(
                _BAD,
                f'"auto" tool choice requires {self._section}.enable_auto_tool_choice and {key} '
                f"to be set {self._where}",
                "tool_choice",
            )
        what = f'function "{t.function}"' if t.choice == "function" else f'"{t.choice}"'
        raise RequestError(
            _BAD, f"tool_choice={what} requires {key} to be set {self._where}", "tool_choice"
        )

    def begin(self, g: Generation) -> ChatParse | None:
        """The parse of `g`'s answer (None: its answer is its text)."""
        if g.messages is None or (g.tools is None and not self.reasoning):
            return None
        self.check(g)
        make = self._cls
        if make is None:  # (tool_choice "none": the tools are only rendered)
            return None
        request = vllm_request(g)
        if self.reasoning or request.tool_choice != "none":  # (as vLLM's renderer does)
            request = make(
                self._tokenizer, request.tools, model_config=self._model_config
            ).adjust_request(request=request)
        parser = make(self._tokenizer, request.tools, model_config=self._model_config)
        return ChatParse(request, parser, self.enable_auto_tools and self._tool_parser, g)


class ChatParse:
    """One answer's parse; `feed` each step's text and token ids."""

    def __init__(self, request: Any, parser: Any, auto_tools: bool, g: Generation) -> None:
        self.request = request
        self._parser = parser
        self._auto_tools = auto_tools
        self._whole = g.parse_whole
        self._tools = g.tools
        self._texts: list[str] = []
        self._ids: list[int] = []
        self._prompt_ids: list[int] | None = None

    @property
    def structured_outputs(self) -> Any:
        """The grammar the tool choice puts on the output (vLLM's StructuredOutputsParams)."""
        return self.request.structured_outputs

    def start(self, prompt_ids: Sequence[int], steps: Sequence[tuple[str, int]] = ()) -> None:
        """Before the first step: the prompt, and the tokens an earlier run generated (resumed),
        each with its text."""
        self._prompt_ids = list(prompt_ids)
        for text, token in steps:
            if self._whole:
                self._texts.append(text)
                self._ids.append(token)
            else:
                self._step(text, [token], finished=False)

    def feed(self, text: str, ids: Sequence[int], finished: bool) -> bytes:
        """What the step added to the answer (msgpack `Parsed`); a whole answer: b"" until it
        finishes, then all of it."""
        if self._whole:
            self._texts.append(text)
            self._ids.extend(ids)
            return parsed.encode(self._parse()) if finished else b""
        if not text and not ids and not finished:
            return parsed.encode(parsed.EMPTY)
        return parsed.encode(self._step(text, list(ids), finished))

    def _step(self, text: str, ids: list[int], finished: bool) -> parsed.Parsed:
        dm = self._parser.parse_delta(
            delta_text=text,
            delta_token_ids=ids,
            request=self.request,
            prompt_token_ids=self._prompt_ids,
            finished=finished,
        )
        if dm is None:
            return parsed.EMPTY
        calls = [
            parsed.ToolCallDelta(
                index=c.index,
                id=c.id,
                name=c.function.name if c.function is not None else None,
                arguments=c.function.arguments if c.function is not None else None,
            )
            for c in dm.tool_calls
            if self.request.parallel_tool_calls is not False or c.index == 0
        ]
        return parsed.Parsed(content=dm.content, reasoning=dm.reasoning, tool_calls=tuple(calls))

    def _parse(self) -> parsed.Parsed:
        """The whole answer, as vLLM's non-streamed chat completion gives its message."""
        from vllm.renderers.chat_utils import make_tool_call_id

        if self._prompt_ids is not None:
            self._parser.set_prompt_token_ids(self._prompt_ids)
        reasoning, content, calls = self._parser.parse(
            "".join(self._texts),
            self.request,
            enable_auto_tools=self._auto_tools,
            model_output_token_ids=self._ids,
        )
        t = self._tools
        forced = t is not None and t.choice in ("required", "function")
        if forced:
            content = content or ""
        elif t is None or t.choice == "none" or not self._auto_tools:
            calls = None
        out = [(c.id or make_tool_call_id(), c.name, c.arguments) for c in calls or ()]
        if self.request.parallel_tool_calls is False:
            out = out[:1]
        return parsed.Parsed(
            content=content,
            reasoning=reasoning,
            tool_calls=tuple(
                parsed.ToolCallDelta(index=i, id=id_, name=name, arguments=args)
                for i, (id_, name, args) in enumerate(out)
            ),
        )


def template_tools(g: Generation, chat: ChatParse | None = None) -> list[dict[str, Any]] | None:
    """The tools for the chat template, as vLLM's server gives them to it."""
    if g.tools is None or g.messages is None:
        return None
    request = chat.request if chat is not None else vllm_request(g)
    return [tool.model_dump() for tool in request.tools]
