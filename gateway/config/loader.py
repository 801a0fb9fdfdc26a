"""Load a config file: YAML -> typed Config, with errors that name the file and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import yaml

from gateway.config.schema import Config


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
    try:
        return msgspec.convert(data, Config)
    except msgspec.ValidationError as e:
        raise ConfigError(f"{origin}: {e}") from None
