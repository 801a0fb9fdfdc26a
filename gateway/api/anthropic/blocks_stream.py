"""The content blocks of a streamed answer with tools, from its engine's parsed deltas, as
Anthropic streams them: a block opens (content_block_start) when its first piece comes, text as
text_delta events, a call as a tool_use block (id, name, empty input) whose arguments follow as
input_json_delta events (partial_json); opening a block closes the one before it
(content_block_stop), and the last one closes at the end."""

from __future__ import annotations

from typing import Any, Final

from shardgate.v1 import parsed

from gateway.api.anthropic.encode import event
from gateway.api.anthropic.tools import tool_use_id

__all__ = ["BlockStream"]

_START: Final = b"content_block_start"
_DELTA: Final = b"content_block_delta"
_STOP: Final = b"content_block_stop"


class BlockStream:
    __slots__ = ("_blocks", "_count", "_open", "_text")

    def __init__(self) -> None:
        self._count = 0  # blocks opened
        self._open = -1  # the index of the open block (-1: none)
        self._text = False  # the open block is text
        self._blocks: dict[int, int] = {}  # a call's index -> its block's index

    @property
    def tool_used(self) -> bool:
        return bool(self._blocks)

    def _start(self, buf: bytearray, block: dict[str, Any]) -> int:
        self.close_into(buf)
        index = self._open = self._count
        self._count += 1
        buf += event(
            _START, {"type": "content_block_start", "index": index, "content_block": block}
        )
        return index

    def add_into(self, buf: bytearray, p: parsed.Parsed) -> None:
        """Append the events of what one step added to the answer."""
        if p.content:
            if not self._text:
                self._start(buf, {"type": "text", "text": ""})
                self._text = True
            delta = {"type": "text_delta", "text": p.content}
            buf += event(
                _DELTA, {"type": "content_block_delta", "index": self._open, "delta": delta}
            )
        for c in p.tool_calls:
            index = self._blocks.get(c.index)
            if index is None or c.id is not None:  # a new call
                block = {
                    "type": "tool_use",
                    "id": tool_use_id(c.id),
                    "name": c.name or "",
                    "input": {},
                }
                index = self._blocks[c.index] = self._start(buf, block)
            if c.arguments:
                delta = {"type": "input_json_delta", "partial_json": c.arguments}
                data = {"type": "content_block_delta", "index": index, "delta": delta}
                buf += event(_DELTA, data)

    def close_into(self, buf: bytearray) -> None:
        """Close the open block, if any."""
        if self._open >= 0:
            buf += event(_STOP, {"type": "content_block_stop", "index": self._open})
            self._open = -1
            self._text = False
