from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine_sidecar.backends.sim import SimConfig
from tests.integration.cluster import Cluster

GATEWAY_YAML = """
gateway:
  max_body_bytes: 1048576
  default_max_tokens: 64
"""


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    sim = SimConfig(model="sim-llama", profile="fast", max_model_len=4096)
    c = Cluster(GATEWAY_YAML, [{"sim": sim}, {"sim": sim}])
    c.start()
    yield c
    c.stop()
