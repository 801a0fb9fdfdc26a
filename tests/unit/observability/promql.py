"""Metric names a PromQL expression reads (enough PromQL for our rules and dashboard)."""

from __future__ import annotations

import re

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_LABEL_VALUES = re.compile(r"label_values\(\s*([A-Za-z_:][\w:]*)[^)]*\)")
_IDENT = re.compile(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()")
# fmt: off
_KEYWORDS = frozenset([
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "and", "or", "unless", "offset", "inf", "nan",
])
# fmt: on


def metric_names(expr: str) -> set[str]:
    found = set(_LABEL_VALUES.findall(expr))
    expr = _LABEL_VALUES.sub("", expr)
    for pattern in (_STRINGS, _MATCHERS, _RANGES, _LABEL_LISTS):
        expr = pattern.sub(" ", expr)
    return found | {n for n in _IDENT.findall(expr) if n.lower() not in _KEYWORDS}
