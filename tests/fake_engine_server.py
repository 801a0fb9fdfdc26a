"""The small OpenAI-compatible engine server of the drills (drill/engine_server.py), under the
name the tests and the bench use (`python -m tests.fake_engine_server PORT [TOKEN_DELAY_S]`)."""

from __future__ import annotations

from drill.engine_server import MODEL, FakeEngineServer, main

__all__ = ["MODEL", "FakeEngineServer", "main"]

if __name__ == "__main__":
    main()
