"""The committed generated code must match the .proto files (run `make protos` when it fails)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "protos"
NAMES = ("engine", "gateway")


@pytest.mark.parametrize("name", NAMES)
def test_generated_code_is_fresh(name: str, tmp_path: Path) -> None:
    proto = f"shardgate/v1/{name}.proto"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTOS}",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            proto,
        ],
        check=True,
    )
    for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
        rel = f"shardgate/v1/{name}{suffix}"
        fresh = (tmp_path / rel).read_text()
        committed = (PROTOS / rel).read_text()
        assert committed == fresh, f"{rel} is stale: run `make protos`"
