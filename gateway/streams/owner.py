"""Which worker keeps a stream or a response (`--workers N`): its id says so.

Under `--workers N` each worker keeps its own streams and responses. Their ids carry the
worker's tag after the kind's prefix (`st_w1_...`, `resp_w1_...`), so that the worker a
reattach, retrieve or cancel reaches knows which sibling to hand it to. The rest of an id stays
as opaque and unguessable as before. A single gateway makes untagged ids and never reads one.
Pure: no I/O.
"""

from __future__ import annotations

STREAM = "st_"
RESPONSE = "resp_"

_MAX_DIGITS = 4


def tag(index: int | None) -> str:
    """What follows the kind's prefix in the ids a worker makes ("" for a single gateway)."""
    return "" if index is None else f"w{index}_"


def owner_of(ident: str, prefix: str) -> int | None:
    """The worker an id of this kind names (None: not a worker's id of this kind)."""
    if not ident.startswith(prefix):
        return None
    rest = ident[len(prefix) :]
    if rest[:1] != "w":
        return None
    digits, sep, tail = rest[1:].partition("_")
    if not sep or not tail or not digits.isascii() or not digits.isdigit():
        return None
    if len(digits) > _MAX_DIGITS or (len(digits) > 1 and digits[0] == "0"):
        return None
    return int(digits)


class Owners:
    """This worker's seat (`index` of `of`): which sibling, if any, keeps an id."""

    __slots__ = ("index", "of")

    def __init__(self, index: int, of: int) -> None:
        self.index = index
        self.of = of

    def sibling(self, ident: str, prefix: str) -> int | None:
        """The other worker that keeps `ident` (None: this one does, or none does)."""
        owner = owner_of(ident, prefix)
        if owner is None or owner == self.index or owner >= self.of:
            return None
        return owner
