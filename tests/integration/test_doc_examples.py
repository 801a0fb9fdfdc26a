"""Every shell and Python example of README.md and docs/ runs, as pasted, against a real local
cluster (`shardgate up` of the config its fence names), exits 0 and prints what its fence says
it should. The cluster's ports are moved with `--port-offset` (a free set of them, outside the
kernel's ephemeral range), and the examples' gateway ports with it; nothing else in them is
changed. See tests/doc_examples.py for the fence attributes."""

from __future__ import annotations

import contextlib
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.doc_examples import ROOT, RUN_LANGUAGES, Example, examples, moved
from tests.engines import require
from tests.integration.poll import until
from tests.integration.test_up import shardgate_up
from tests.ports import bindable

EXAMPLES = examples()
RUNNABLE = [e for e in EXAMPLES if e.runs]
NOT_RUN = [e for e in EXAMPLES if e.language in RUN_LANGUAGES and not e.runs]
README_MAX_LINES = 250
# Offsets that put 8080 below and 5005x above Linux's default ephemeral range (32768-60999).
OFFSETS = range(11000, 15400)
ENGINE_OF = {"configs/local-vllm.yaml": "vllm"}
READY_TIMEOUT_S = {"configs/local-vllm.yaml": 300.0}


def _config_ports(config: str) -> list[int]:
    text = (ROOT / config).read_text()
    return sorted({int(p) for p in re.findall(r"(?:port: |127\.0\.0\.1:)(\d{4,5})\b", text)})


def _offset_for(config: str) -> int:
    ports = _config_ports(config)
    assert 8080 in ports and 50051 in ports, f"{config}: the examples' ports are not its own"
    for _ in range(200):
        offset = random.choice(OFFSETS)
        if all(p + offset < 65536 and bindable(p + offset) for p in ports):
            return offset
    raise AssertionError(f"no free set of ports for {config}")


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=5) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


class Clusters:
    """One `shardgate up` per config the examples name, started when first needed."""

    def __init__(self, stack: contextlib.ExitStack, logs: Path) -> None:
        self.stack, self.logs = stack, logs
        self.offsets: dict[str, int] = {}

    def offset(self, config: str) -> int:
        if config not in self.offsets:
            self.offsets[config] = self._start(config)
        return self.offsets[config]

    def _start(self, config: str) -> int:
        offset = _offset_for(config)
        log: IO[bytes] = self.stack.enter_context(
            (self.logs / f"{Path(config).stem}.log").open("wb")
        )
        proc = self.stack.enter_context(
            shardgate_up("--config", config, "--port-offset", str(offset), stderr=log)
        )
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        banner = proc.stdout.readline() if ready else b""
        assert b"shardgate is up" in banner, (config, proc.poll(), banner)
        # The rest of its stdout (its sidecars' too) to its log, so that no pipe ever fills.
        drain = threading.Thread(target=shutil.copyfileobj, args=(proc.stdout, log), daemon=True)
        drain.start()
        self.stack.callback(_stop, proc, drain)  # (before shardgate_up's kill, if it must)
        url = f"http://127.0.0.1:{8080 + offset}"
        until(  # every model pool has a routable replica (or it stopped)
            lambda: proc.poll() is not None or _ready(url),
            READY_TIMEOUT_S.get(config, 60.0),
            f"{config}: /readyz answering 200",
        )
        assert proc.poll() is None, f"{config}: shardgate up exited ({proc.returncode})"
        return offset


def _stop(proc: subprocess.Popen[bytes], drain: threading.Thread) -> None:
    """As Ctrl-C stops it: the gateway drains, then stops its sidecars and their engines."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
    drain.join(timeout=5)


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    with contextlib.ExitStack() as stack:
        yield Clusters(stack, tmp_path_factory.mktemp("doc-clusters"))


def _command(example: Example, code: str) -> list[str]:
    if example.language == "python":
        return [sys.executable, "-c", code]
    return ["bash", "-eo", "pipefail", "-c", code]


def test_every_example_says_whether_it_runs_and_what_it_prints() -> None:
    for e in EXAMPLES:
        if e.language not in RUN_LANGUAGES:
            assert not e.attrs, f"{e.id}: a {e.language or 'plain'} fence is never run"
            continue
        assert ("expect" in e.attrs) != ("norun" in e.attrs), (
            f"{e.id}: a {e.language} example needs expect=... (what it prints) or norun=... (why "
            "it cannot run here), not both"
        )
        if "norun" in e.attrs:
            assert len(e.attrs["norun"].split()) >= 3, f"{e.id}: say why it does not run"
        else:
            re.compile(e.attrs["expect"])
            assert (ROOT / e.cluster).is_file(), f"{e.id}: no {e.cluster}"


def test_the_examples_not_run_are_few_and_counted() -> None:
    """The examples that cannot run here, each with its reason, in the test's output; most
    examples run."""
    for e in NOT_RUN:
        print(f"not run: {e.id}: {e.attrs['norun']}")
    print(f"{len(RUNNABLE)} examples run, {len(NOT_RUN)} not")
    assert len(NOT_RUN) * 3 <= len(RUNNABLE)


def test_the_readme_fits_on_a_screen() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines"


def test_the_docs_links_lead_somewhere() -> None:
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.relative_to(ROOT)}: {target}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("example", RUNNABLE, ids=[e.id for e in RUNNABLE])
def test_the_example_runs_as_pasted(example: Example, clusters: Clusters) -> None:
    if example.cluster in ENGINE_OF:
        require(ENGINE_OF[example.cluster])
    offset = clusters.offset(example.cluster)
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        _command(example, moved(example.code, offset)),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=float(example.attrs.get("timeout", "120")),
    )
    shown = f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
    assert done.returncode == 0, f"{example.id} exited {done.returncode}\n{shown}"
    expect = example.attrs["expect"]
    assert re.search(expect, done.stdout, re.M), f"{example.id}: no /{expect}/ in\n{shown}"
