from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ai.llm_server import LlmServer


@pytest.fixture(scope="module")
def llm() -> Iterator[LlmServer]:
    server = LlmServer().start()
    try:
        yield server
    finally:
        server.stop()
