"""Stop strings over streamed text, applied the way vLLM applies them.

The text ends before the first stop string to complete; while the last characters could still
begin one (the longest stop string's length less one), they are held back. What has been
emitted is thus a function of the text so far: a matcher primed with the text of a resumed
request's earlier tokens holds back what the earlier run held back, and this run emits it.
"""

from __future__ import annotations

from collections.abc import Sequence


class StopStrings:
    """`include`: the stop string stays in the text (vLLM's include_stop_str_in_output), and
    nothing is held back (the search still looks back across the last emitted characters)."""

    __slots__ = ("_include", "_keep", "_stops", "_tail", "matched")

    def __init__(self, stops: Sequence[str], text_so_far: str = "", include: bool = False) -> None:
        self._stops = tuple(s for s in stops if s)
        self._keep = max((len(s) for s in self._stops), default=1) - 1
        self._tail = text_so_far[-self._keep :] if self._keep else ""
        self._include = include
        self.matched = ""  # the stop string that ended the request, once one did

    def feed(self, text: str, search: bool = True) -> tuple[str, bool]:
        """The text to emit now, and whether a stop string ended the request. Without
        `search`, no stop string may complete in `text` (vLLM's min_tokens)."""
        if not self._stops:
            return text, False
        tail = self._tail
        window = tail + text
        start, end, matched = -1, len(window) + 1, ""
        if search:
            for stop in self._stops:
                # Only one that ends in the new text (the tail was searched, or may not stop).
                i = window.find(stop, max(len(tail) - len(stop) + 1, 0))
                if i != -1 and i + len(stop) < end:  # the one that completes first
                    start, end, matched = i, i + len(stop), stop
        if start != -1:
            self._tail = ""
            self.matched = matched
            return (window[len(tail) : end], True) if self._include else (window[:start], True)
        cut = max(len(window) - self._keep, 0)
        self._tail = window[cut:]
        return (text, False) if self._include else (window[:cut], False)

    def flush(self) -> str:
        """What is held back, at the end of a request that no stop string ended."""
        tail, self._tail = self._tail, ""
        return "" if self._include else tail
