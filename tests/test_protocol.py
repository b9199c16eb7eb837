"""Each protocol rule, over HTTPS against a real gateway subprocess, in both protocol eras.

The legacy era (2025-03-26 .. 2025-11-25: initialize, MCP-Protocol-Version header, batches
only in 2025-03-26) and the modern era (2026-07-28: server/discover, the _meta version
envelope, Mcp-Method/Mcp-Name routing headers, resultType, ttlMs/cacheScope).
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterator

import httpx
import pytest
from server_process import MODERN_VERSION, GatewayProcess, call_tool, post_rpc, registered_endpoints, rpc_body, start_gateway

LEGACY_VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25")
CONFIG_TOOLS = {"get_config", "set_config", "list_variables", "reload_config", "get_status"}
ALLOWED_ORIGIN = "https://agent.example"
MAX_REQUEST_BYTES = 4096


@pytest.fixture(scope="module")
def gateway() -> Iterator[GatewayProcess]:
    # A small page size exercises tools/list cursor paging; a small body cap makes 413 cheap to hit.
    variables = {"mcp-tools_page_size": 2, "mcp-allowed_origins": ALLOWED_ORIGIN, "mcp-max_request_bytes": MAX_REQUEST_BYTES}
    with start_gateway(variables=variables) as process:
        yield process


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    with gateway.client() as http:
        yield http


def _error(response: httpx.Response) -> dict:
    """The JSON-RPC error of a response, checking the envelope is well formed."""
    answer = response.json()
    assert answer["jsonrpc"] == "2.0" and "result" not in answer, answer
    assert isinstance(answer["error"]["code"], int) and isinstance(answer["error"]["message"], str), answer
    return answer["error"]


# -- HTTP layer ----------------------------------------------------------------------------------


def test_served_over_tls_with_the_generated_certificate(gateway: GatewayProcess) -> None:
    assert gateway.base_url.startswith("https://")
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{gateway.base_url}/healthz", timeout=5.0)  # the system CAs do not know the self-signed cert
    plain = gateway.base_url.replace("https://", "http://")
    with pytest.raises(httpx.HTTPError):
        response = httpx.get(f"{plain}/healthz", timeout=5.0)
        response.raise_for_status()  # uvicorn may answer 400 to plain HTTP on a TLS port; never 200


def test_healthz_needs_no_token_and_answers_json(client: httpx.Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert isinstance(response.json(), dict)


def test_metrics_are_prometheus_text_without_token(client: httpx.Client, gateway: GatewayProcess) -> None:
    call_tool(client, gateway, "config", "get_config", {"variable_name": "mcp-timeout_ms"})
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert "# TYPE" in response.text
    samples = [line for line in response.text.splitlines() if line.startswith("mcp_server_operation_duration_seconds_count")]
    assert any('tool="get_config"' in line and 'endpoint="config"' in line for line in samples), samples
    for token in gateway.tokens.values():
        assert token not in response.text


def test_unknown_endpoint_is_404_with_jsonrpc_error(client: httpx.Client, gateway: GatewayProcess) -> None:
    response = client.post("/mcp/nosuch", json=rpc_body("ping"), headers=gateway.auth("config"))
    assert response.status_code == 404
    _error(response)


def test_get_is_405_with_allow_post(client: httpx.Client, gateway: GatewayProcess) -> None:
    response = client.get("/mcp/config", headers=gateway.auth("config"))
    assert response.status_code == 405
    assert "POST" in response.headers["allow"]


def test_options_is_answered(client: httpx.Client) -> None:
    response = client.options("/mcp/config", headers={"Origin": ALLOWED_ORIGIN, "Access-Control-Request-Method": "POST"})
    assert response.status_code in (200, 204)
    assert "POST" in response.headers.get("allow", "") + response.headers.get("access-control-allow-methods", "")


def test_oversized_body_is_413_before_parsing(client: httpx.Client, gateway: GatewayProcess) -> None:
    not_even_json = b"x" * (MAX_REQUEST_BYTES + 1)
    response = client.post(
        "/mcp/config", content=not_even_json, headers={**gateway.auth("config"), "Content-Type": "application/json"}
    )
    assert response.status_code == 413
    _error(response)


def test_oversized_chunked_body_without_length_is_413(client: httpx.Client, gateway: GatewayProcess) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap must hold while streaming
        for _ in range(8):
            yield b" " * 1024

    response = client.post(
        "/mcp/config", content=chunks(), headers={**gateway.auth("config"), "Content-Type": "application/json"}
    )
    assert response.status_code == 413


def test_non_json_content_type_is_415(client: httpx.Client, gateway: GatewayProcess) -> None:
    body = json.dumps(rpc_body("ping"))
    response = client.post("/mcp/config", content=body, headers={**gateway.auth("config"), "Content-Type": "text/plain"})
    assert response.status_code == 415
    _error(response)


def test_invalid_json_is_parse_error(client: httpx.Client, gateway: GatewayProcess) -> None:
    response = client.post(
        "/mcp/config",
        content=b'{"jsonrpc": "2.0", "id": 1,',
        headers={**gateway.auth("config"), "Content-Type": "application/json"},
    )
    assert response.status_code in (200, 400)
    error = _error(response)
    assert error["code"] == -32700
    assert response.json()["id"] is None


def test_origin_outside_allowed_list_is_403(client: httpx.Client, gateway: GatewayProcess) -> None:
    bad = post_rpc(client, gateway, "config", "ping", headers={"Origin": "https://evil.example"})
    assert bad.status_code == 403
    _error(bad)
    good = post_rpc(client, gateway, "config", "ping", headers={"Origin": ALLOWED_ORIGIN})
    assert good.status_code == 200 and good.json()["result"] == {}


def test_unsupported_protocol_version_header_is_400(client: httpx.Client, gateway: GatewayProcess) -> None:
    response = post_rpc(client, gateway, "config", "ping", version="1999-01-01")
    assert response.status_code == 400
    _error(response)


# -- legacy era ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", LEGACY_VERSIONS)
def test_initialize_negotiates_each_supported_version(client: httpx.Client, gateway: GatewayProcess, version: str) -> None:
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "pytest", "version": "0"}}
    response = post_rpc(client, gateway, "config", "initialize", params, version=None)
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["protocolVersion"] == version
    assert result["capabilities"]["tools"] == {"listChanged": False}
    assert result["serverInfo"]["name"] and result["serverInfo"]["version"]
    assert "Mcp-Session-Id" not in response.headers  # stateless: the SDK then opens no GET stream


def test_initialize_with_unknown_version_answers_one_we_support(client: httpx.Client, gateway: GatewayProcess) -> None:
    params = {"protocolVersion": "2030-01-01", "capabilities": {}, "clientInfo": {"name": "pytest", "version": "0"}}
    result = post_rpc(client, gateway, "config", "initialize", params, version=None).json()["result"]
    assert result["protocolVersion"] in LEGACY_VERSIONS


def test_notification_is_202_without_body(client: httpx.Client, gateway: GatewayProcess) -> None:
    response = post_rpc(client, gateway, "config", "notifications/initialized", msg_id=None)
    assert response.status_code == 202
    assert response.content == b""


def test_ping_answers_empty_result(client: httpx.Client, gateway: GatewayProcess) -> None:
    response = post_rpc(client, gateway, "config", "ping", msg_id="abc")
    assert response.status_code == 200
    assert response.json() == {"jsonrpc": "2.0", "id": "abc", "result": {}}


def test_tools_list_pages_with_cursor(client: httpx.Client, gateway: GatewayProcess) -> None:
    names: list[str] = []
    cursor = None
    for _ in range(20):
        params = {"cursor": cursor} if cursor else {}
        result = post_rpc(client, gateway, "config", "tools/list", params).json()["result"]
        assert len(result["tools"]) <= 2
        for tool in result["tools"]:
            assert isinstance(tool["inputSchema"], dict) and tool["inputSchema"]["type"] == "object"
            assert tool["description"] and tool["annotations"]
        names += [tool["name"] for tool in result["tools"]]
        cursor = result.get("nextCursor")
        if not cursor:
            break
    assert len(names) == len(set(names))
    assert set(names) >= CONFIG_TOOLS


@pytest.mark.parametrize("endpoint", registered_endpoints())
def test_every_tool_is_well_described(client: httpx.Client, gateway: GatewayProcess, endpoint: str) -> None:
    """Names a strict client accepts (spec: 1-128 of [A-Za-z0-9_.-]), schemas, truthful-looking hints."""
    tools, cursor = [], None
    while True:
        result = post_rpc(client, gateway, endpoint, "tools/list", {"cursor": cursor} if cursor else {}).json()["result"]
        tools += result["tools"]
        cursor = result.get("nextCursor")
        if not cursor:
            break
    for tool in tools:
        assert re.fullmatch(r"[A-Za-z0-9_.\-]{1,128}", tool["name"]), tool["name"]
        assert tool["description"].strip() and tool["title"].strip(), tool["name"]
        assert tool["inputSchema"]["type"] == "object" and tool["outputSchema"]["type"] == "object", tool["name"]
        hints = tool["annotations"]
        assert {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"} <= set(hints), tool["name"]
        assert not (hints["readOnlyHint"] and hints["destructiveHint"]), tool["name"]


def test_tools_list_invalid_cursor_is_32602(client: httpx.Client, gateway: GatewayProcess) -> None:
    assert _error(post_rpc(client, gateway, "config", "tools/list", {"cursor": "not-a-cursor!"}))["code"] == -32602


def test_tools_call_returns_structured_content_and_text(client: httpx.Client, gateway: GatewayProcess) -> None:
    result = call_tool(client, gateway, "config", "get_config", {"variable_name": "mcp-tools_page_size"})
    assert result["isError"] is False
    # programs read structuredContent; the text block is the compact rendering the model reads
    assert result["structuredContent"]["variable_name"] == "mcp-tools_page_size"
    assert "variable_name: mcp-tools_page_size" in result["content"][0]["text"].splitlines()
    assert "2" in json.dumps(result["structuredContent"])


def test_secret_variables_are_masked(client: httpx.Client, gateway: GatewayProcess) -> None:
    result = call_tool(client, gateway, "config", "get_config", {"variable_name": "mcp-query_endpoint_auth"})
    listed = call_tool(client, gateway, "config", "list_variables", {"filter": "endpoint_auth"})
    for token in gateway.tokens.values():
        assert token not in json.dumps(result) and token not in json.dumps(listed)


def test_dotted_and_portable_tool_names_both_call(client: httpx.Client, gateway: GatewayProcess) -> None:
    listed = post_rpc(client, gateway, "admin", "tools/list").json()["result"]["tools"]
    dotted = next(tool["name"] for tool in listed if "." in tool["name"])
    for name in (dotted, dotted.replace(".", "_")):
        response = post_rpc(client, gateway, "admin", "tools/call", {"name": name, "arguments": {}})
        answer = response.json()
        # the empty arguments may be invalid for the tool: what matters is that the name resolved
        assert "result" in answer, (name, answer)


def test_portable_name_style_lists_underscored_names(client: httpx.Client, gateway: GatewayProcess) -> None:
    def admin_names() -> set[str]:
        return {tool["name"] for tool in post_rpc(client, gateway, "admin", "tools/list").json()["result"]["tools"]}

    assert "admin.sql" in admin_names()
    call_tool(client, gateway, "config", "set_config", {"variable_name": "mcp-tool_name_style", "value": "portable"})
    try:
        deadline = time.monotonic() + 5
        while "admin_sql" not in admin_names() and time.monotonic() < deadline:
            time.sleep(0.1)
        names = admin_names()
        assert "admin_sql" in names and not any("." in name for name in names), names
        result = call_tool(client, gateway, "admin", "admin.sql", {"statement": "SELECT 1"})  # the dotted name still resolves
        assert "error" not in result["structuredContent"] or result["structuredContent"]["error"]["code"] != "NOT_FOUND"
    finally:
        call_tool(client, gateway, "config", "set_config", {"variable_name": "mcp-tool_name_style", "value": "dotted"})
        deadline = time.monotonic() + 5
        while "admin.sql" not in admin_names() and time.monotonic() < deadline:
            time.sleep(0.1)


def test_tools_describe(client: httpx.Client, gateway: GatewayProcess) -> None:
    tool = post_rpc(client, gateway, "config", "tools/describe", {"name": "get_config"}).json()["result"]["tool"]
    assert tool["name"] == "get_config" and tool["inputSchema"]["properties"]["variable_name"]
    assert _error(post_rpc(client, gateway, "config", "tools/describe", {"name": "nope"}))["code"] == -32602


@pytest.mark.parametrize("method", ["prompts/list", "resources/list"])
def test_capabilities_not_served_are_not_found(client: httpx.Client, gateway: GatewayProcess, method: str) -> None:
    assert _error(post_rpc(client, gateway, "stats", method))["code"] == -32601  # tests/gateway/test_capabilities.py


def test_unknown_method_is_32601(client: httpx.Client, gateway: GatewayProcess) -> None:
    response = post_rpc(client, gateway, "config", "no/such/method", msg_id=7)
    assert response.status_code == 200
    assert _error(response)["code"] == -32601
    assert response.json()["id"] == 7


@pytest.mark.parametrize("method", [[], {}, ["tools/list"], 5, None])
def test_non_string_method_is_invalid_request_not_500(gateway: GatewayProcess, method: object) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 3, "method": method})
    with gateway.client() as fresh:  # a 500 closes the connection: keep it off the shared one
        response = fresh.post("/mcp/config", content=body, headers={**gateway.auth("config"), "Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    assert _error(response)["code"] == -32600


def test_unknown_tool_is_32602(client: httpx.Client, gateway: GatewayProcess) -> None:
    response = post_rpc(client, gateway, "config", "tools/call", {"name": "rag.search_fts", "arguments": {}})
    assert _error(response)["code"] == -32602


@pytest.mark.parametrize("arguments", [{}, {"variable_name": 5}, {"variable_name": "mcp-port", "extra": 1}])
def test_invalid_arguments_are_a_tool_error(client: httpx.Client, gateway: GatewayProcess, arguments: dict) -> None:
    result = call_tool(client, gateway, "config", "get_config", arguments)
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "INVALID_ARGUMENT"


def test_batch_allowed_only_in_2025_03_26(client: httpx.Client, gateway: GatewayProcess) -> None:
    batch = [rpc_body("ping", msg_id=1), rpc_body("notifications/initialized", msg_id=None), rpc_body("tools/list", msg_id=2)]
    old = client.post("/mcp/config", json=batch, headers={**gateway.auth("config"), "MCP-Protocol-Version": "2025-03-26"})
    assert old.status_code == 200
    answers = old.json()
    assert isinstance(answers, list) and sorted(a["id"] for a in answers) == [1, 2]
    for version in ("2025-06-18", "2025-11-25"):
        new = client.post("/mcp/config", json=batch, headers={**gateway.auth("config"), "MCP-Protocol-Version": version})
        assert new.status_code == 400
        assert _error(new)["code"] == -32600 and new.json()["id"] is None


# -- modern era (2026-07-28) ---------------------------------------------------------------------


def test_server_discover(client: httpx.Client, gateway: GatewayProcess) -> None:
    response = post_rpc(client, gateway, "config", "server/discover", modern=True)
    assert response.status_code == 200
    result = response.json()["result"]
    assert MODERN_VERSION in result["supportedVersions"]
    assert set(LEGACY_VERSIONS) <= set(result["supportedVersions"])
    assert result["resultType"] == "complete"
    assert result["capabilities"]["tools"] is not None


def test_modern_tools_list_carries_cache_hints(client: httpx.Client, gateway: GatewayProcess) -> None:
    result = post_rpc(client, gateway, "config", "tools/list", modern=True).json()["result"]
    assert result["resultType"] == "complete"
    assert isinstance(result["ttlMs"], int) and result["ttlMs"] >= 0
    assert result["cacheScope"] in ("private", "public")
    assert result["tools"]


def test_modern_tools_call_with_matching_headers(client: httpx.Client, gateway: GatewayProcess) -> None:
    params = {"name": "get_config", "arguments": {"variable_name": "mcp-timeout_ms"}}
    for name_header in ("get_config", "=?base64?" + base64.b64encode(b"get_config").decode() + "?="):
        response = post_rpc(client, gateway, "config", "tools/call", params, modern=True, headers={"Mcp-Name": name_header})
        assert response.status_code == 200, response.text
        result = response.json()["result"]
        assert result["resultType"] == "complete" and result["isError"] is False


@pytest.mark.parametrize(
    "headers",
    [{"Mcp-Method": "tools/list"}, {"Mcp-Name": "set_config"}, {"MCP-Protocol-Version": "2025-11-25"}],
    ids=["method", "name", "version"],
)
def test_modern_header_mismatch_is_32020(client: httpx.Client, gateway: GatewayProcess, headers: dict) -> None:
    params = {"name": "get_config", "arguments": {"variable_name": "mcp-timeout_ms"}}
    response = post_rpc(client, gateway, "config", "tools/call", params, modern=True, headers=headers)
    assert response.status_code == 400
    assert _error(response)["code"] == -32020


def test_modern_unsupported_version_is_32022(client: httpx.Client, gateway: GatewayProcess) -> None:
    body = rpc_body("tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}})
    response = client.post("/mcp/config", json=body, headers={**gateway.auth("config"), "Mcp-Method": "tools/list"})
    assert response.status_code == 400
    error = _error(response)
    assert error["code"] == -32022
    assert MODERN_VERSION in error["data"]["supported"]


def test_modern_unknown_method_is_32601_never_202(client: httpx.Client, gateway: GatewayProcess) -> None:
    response = post_rpc(client, gateway, "config", "subscriptions/listen", modern=True)
    assert response.status_code == 200
    assert _error(response)["code"] == -32601


def test_unknown_mcp_headers_are_ignored(client: httpx.Client, gateway: GatewayProcess) -> None:
    response = post_rpc(client, gateway, "config", "ping", headers={"Mcp-Future-Thing": "x", "Mcp-Session-Id": "abc"})
    assert response.status_code == 200 and response.json()["result"] == {}
