"""rag.get_chunks / rag.get_docs with more ids than rag-k_max say what was sent, what was looked
up and what the cap left out, instead of "none of the 50 chunk_ids is in the index"."""

from __future__ import annotations

import pytest
from server_process import GatewayProcess, call_tool, registered_endpoints

pytestmark = pytest.mark.skipif("rag" not in registered_endpoints(), reason="the rag endpoint is needed")


@pytest.mark.parametrize(("tool", "key"), [("rag.get_chunks", "chunk_ids"), ("rag.get_docs", "doc_ids")])
def test_unknown_ids_over_the_cap_report_sent_and_capped(gateway_server: GatewayProcess, tool: str, key: str) -> None:
    ids = [f"no-such-id-{i}" for i in range(1000)]
    with gateway_server.client() as http:
        result = call_tool(http, gateway_server, "rag", tool, {key: ids})
        error = result["structuredContent"]["error"]
        assert result["isError"] and error["code"] == "NOT_FOUND", result
        assert "1000" in error["message"] and "50" in error["message"] and "rag-k_max" in error["message"], error
        missing = error["details"].pop("missing")
        assert missing == [f"no-such-id-{i}" for i in range(50)]  # what was looked up (issue 29)
        assert error["details"] == {"sent": 1000, "distinct": 1000, "looked_up": 50, "not_looked_up": 950, "cap": "rag-k_max"}
        # Duplicates count once; under the cap nothing is left out.
        result = call_tool(http, gateway_server, "rag", tool, {key: ["a", "a", "b"]})
        error = result["structuredContent"]["error"]
        assert len(error["details"].pop("missing")) == 2
        assert error["details"] == {"sent": 3, "distinct": 2, "looked_up": 2, "not_looked_up": 0, "cap": "rag-k_max"}, error
        assert "none of the 2" in error["message"], error
