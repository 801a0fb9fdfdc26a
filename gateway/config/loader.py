"""Load a config file: YAML -> typed Config, with errors that name the file, field and line."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import msgspec
import yaml

from gateway.config.schema import Config

# Overrides `redis.url` of a config that has a `redis:` section (secrets stay out of the file).
REDIS_URL_ENV = "SHARDGATE_REDIS_URL"

_PATH = re.compile(r"at `\$((?:\.[^.\[`]+|\[\d+\])*)`")
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_UNKNOWN = re.compile(r"unknown field `([^`]+)`")


class ConfigError(ValueError):
    pass


def load(path: str | Path) -> Config:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"{p}: {e.strerror}") from None
    return parse(text, str(p))


def parse(text: str, origin: str = "<config>") -> Config:
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{origin}: not valid YAML: {e}") from None
    if data is None:
        data = {}
    url = os.environ.get(REDIS_URL_ENV)
    if url and isinstance(data, dict) and isinstance(data.get("redis"), dict):
        data["redis"] = {**data["redis"], "url": url}
    try:
        return msgspec.convert(data, Config)
    except msgspec.ValidationError as e:
        line = locate(text, str(e))
        where = f"{origin}:{line}" if line else origin
        raise ConfigError(f"{where}: {e}") from None


def locate(text: str, message: str) -> int | None:
    """The 1-based line of the field a validation message names (`... at `$.a.b[0]``)."""
    m = _PATH.search(message)
    steps = _STEP.findall(m.group(1)) if m else []
    unknown = _UNKNOWN.search(message)
    if unknown:
        steps.append((unknown.group(1), ""))
    if not steps:
        return None
    try:
        node: Any = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for key, index in steps:
        if isinstance(node, yaml.MappingNode) and key:
            found = [(k, v) for k, v in node.value if getattr(k, "value", None) == key]
            if not found:
                break
            k, node = found[0]
            line = k.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and index:
            i = int(index)
            if i >= len(node.value):
                break
            node = node.value[i]
            line = node.start_mark.line + 1
        else:
            break
    return line
