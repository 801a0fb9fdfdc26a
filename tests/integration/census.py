"""Objects the cyclic collector tracks per open stream, by type: the setup of
test_stream_memory (a sim sidecar process, the gateway here, a client process), counted with
`gc.get_objects()` before the client starts and once every stream streams.

    python -m tests.integration.census
"""

from __future__ import annotations

import asyncio
import collections
import gc
import tempfile
from pathlib import Path

from gateway.app import Gateway
from gateway.config.loader import parse
from tests.integration import test_stream_memory as setup
from tests.integration.test_process_failover import sidecar_processes


def tracked() -> collections.Counter[str]:
    gc.collect()
    return collections.Counter(type(o).__qualname__ for o in gc.get_objects())


async def main(top: int = 40) -> None:
    with tempfile.TemporaryDirectory() as logs, sidecar_processes(1, Path(logs), setup.SIM) as p:
        (address,) = p
        gw = Gateway(parse(setup.GATEWAY_YAML % address), http_port=0, grpc_port=0)
        await gw.start()
        client: setup.Client | None = None
        try:
            assert await gw.fleet.wait_connected(30.0)
            frozen, before = gc.get_freeze_count(), tracked()
            client = await setup.Client.start(gw.http_port)
            assert await client.line() == "streaming ok"
            after = tracked()
        finally:
            if client is not None:
                await client.close()
            await gw.stop(1.0)
    n = setup.STREAMS
    grown = sum(after.values()) - sum(before.values())
    print(f"frozen at start-up: {frozen}; tracked per open stream: {grown / n:.1f}")
    for name, count in (after - before).most_common(top):
        print(f"{count / n:7.2f}  {name}")


if __name__ == "__main__":
    asyncio.run(main())
