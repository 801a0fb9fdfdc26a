"""Whether a request survived a fault: completed, lost or corrupted (pure).

Lost: it ended with an error, without `[DONE]`, for another reason than its length, or with
missing or extra tokens (usage.completion_tokens != max_tokens; the load sets `ignore_eos`).
Corrupted: it completed whole, but its text differs from the reference run of the same request.
"""

from __future__ import annotations

import enum
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from drill.requests import RequestRecord, RequestSpec


class Verdict(enum.StrEnum):
    OK = "ok"
    LOST = "lost"
    CORRUPTED = "corrupted"


def problem(record: RequestRecord, spec: RequestSpec) -> str | None:
    """Why the request did not complete whole (None: it did)."""
    if record.error is not None:
        return f"error: {record.error}"
    if record.status != 200:
        return f"http {record.status}"
    if not record.done:
        return "stream ended without [DONE]"
    if record.finish_reason != "length":
        return f"finish_reason {record.finish_reason!r}, expected 'length'"
    if record.completion_tokens != spec.max_tokens:
        return f"{record.completion_tokens} tokens of {spec.max_tokens}"
    return None


def classify(record: RequestRecord, spec: RequestSpec, reference: str) -> tuple[Verdict, str]:
    """The verdict and, unless OK, why."""
    why = problem(record, spec)
    if why is not None:
        return Verdict.LOST, why
    if record.text != reference:
        return (
            Verdict.CORRUPTED,
            f"text differs from the reference at {_diverges(record.text, reference)}",
        )
    return Verdict.OK, ""


def _diverges(a: str, b: str) -> str:
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"character {n} (lengths {len(a)} and {len(b)})"


def _kind(why: str) -> str:
    """A reason with its numbers taken out, to count alike failures together."""
    return re.sub(r"\d+", "N", why)[:100]


@dataclass(slots=True)
class Tally:
    sent: int = 0
    completed: int = 0
    lost: int = 0
    corrupted: int = 0
    # A few examples of what went wrong: "request 3 on 127.0.0.1:50081: 120 tokens of 250".
    examples: list[str] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)


def tally(
    records: Iterable[RequestRecord],
    specs: Mapping[int, RequestSpec],
    references: Mapping[int, str],
    max_examples: int = 10,
) -> Tally:
    t = Tally()
    for r in records:
        t.sent += 1
        verdict, why = classify(r, specs[r.index], references[r.index])
        if verdict is Verdict.OK:
            t.completed += 1
            continue
        if verdict is Verdict.LOST:
            t.lost += 1
        else:
            t.corrupted += 1
        t.reasons[_kind(why)] += 1
        if len(t.examples) < max_examples:
            t.examples.append(f"request {r.index} on {r.replica or '?'}: {why}")
    return t
