"""The shell and Python examples of README.md and docs/: found by their fences, with what each
fence says about running it.

A fence's info string is its language, then `key="value"` (or `key='value'`) attributes,
each value taken as it is written (Markdown renders the language and ignores the rest):
- `expect="REGEX"`: the example runs, exits 0, and its standard output matches REGEX
  (`re.search`, multiline; `\\n` in it is a newline);
- `norun="WHY"`: it does not run here, and says why (the test counts these);
- `cluster="configs/X.yaml"`: the cluster it runs against (default `configs/local.yaml`);
- `timeout="S"`: seconds it may take (default 120).
Every shell (`bash`, `sh`) and Python (`python`) example has `expect` or `norun`; other fences
(YAML, text) are not run. Fences start at the start of a line with three backticks: an indented
fence, or one of tildes, would be neither run nor counted, so either is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_LANGUAGES = frozenset({"bash", "sh", "python"})
DEFAULT_CLUSTER = "configs/local.yaml"
ATTRIBUTES = frozenset({"expect", "norun", "cluster", "timeout"})
_FENCE = re.compile(r"^```(\S*)\s*(.*)$")
_OTHER_FENCE = re.compile(r"^(\s+```|\s*~~~)")
_ATTR = re.compile(r"""\s*(\w+)=(?:"([^"]*)"|'([^']*)'|([^\s"']+))""")


@dataclass(frozen=True)
class Example:
    path: str  # relative to the repository
    line: int  # the opening fence's
    language: str
    code: str
    attrs: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.language in RUN_LANGUAGES and "norun" not in self.attrs

    @property
    def cluster(self) -> str:
        return self.attrs.get("cluster", DEFAULT_CLUSTER)


def parse_info(info: str) -> dict[str, str]:
    """`expect="a b" norun=x` -> {"expect": "a b", "norun": "x"}, backslashes kept; an
    unknown key, or text that is not `key=value`, is an error (a typo must not turn an example
    off)."""
    attrs: dict[str, str] = {}
    pos, info = 0, info.rstrip()
    while pos < len(info):
        m = _ATTR.match(info, pos)
        if m is None or m.group(1) not in ATTRIBUTES:
            word = info[pos:].split()[0]
            raise ValueError(f"fence attribute {word!r}: expected one of {sorted(ATTRIBUTES)}")
        attrs[m.group(1)] = next(v for v in m.group(2, 3, 4) if v is not None)
        pos = m.end()
    return attrs


def parse(text: str, path: str) -> list[Example]:
    """Every fenced block of a Markdown text, in order."""
    out: list[Example] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        if _OTHER_FENCE.match(lines[i]):
            raise ValueError(f"{path}:{i + 1}: a fence not at the start of its line, or of tildes")
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"{path}:{start + 1}: a fence that is never closed")
        i += 1
        try:
            attrs = parse_info(m.group(2))
        except ValueError as e:
            raise ValueError(f"{path}:{start + 1}: {e}") from None
        out.append(Example(path, start + 1, m.group(1), "\n".join(body) + "\n", attrs))
    return out


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def examples() -> list[Example]:
    found: list[Example] = []
    for doc in documents():
        found += parse(doc.read_text(), str(doc.relative_to(ROOT)))
    return found


def moved(code: str, offset: int) -> str:
    """An example's code for a cluster whose ports are `offset` above the documented ones
    (`shardgate up --port-offset`): the gateway's HTTP (8080) and gRPC (50051) ports."""
    return re.sub(r"(?<=:)(8080|50051)\b", lambda m: str(int(m.group(1)) + offset), code)
