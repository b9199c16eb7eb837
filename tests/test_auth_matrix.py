"""Who may call what: every endpoint x every kind of credential, against a real 2-worker gateway.

Only an endpoint's own token (any of its comma-separated tokens, in an `Authorization: Bearer`
header, or as `?token=` once `mcp-allow_query_token` is on) opens it. A token removed at
runtime stops working in every worker. A refusal is 401 with `WWW-Authenticate: Bearer` and a
JSON-RPC error body (-32001), and never says which token nearly matched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from server_process import GatewayProcess, call_tool, default_tokens, post_rpc, registered_endpoints, rpc_body, start_gateway

ROTATED = ("tok-config-old-0123456789abcdef", "tok-config-new-0123456789abcdef")
STATS_ROTATED = ("tok-stats-old-0123456789abcdef", "tok-stats-new-0123456789abcdef")
ENDPOINTS = registered_endpoints()  # every endpoint with a handler in this build
PROPAGATION_S = 5.0  # set_config promises every worker within a second; allow slack on a busy CI box


@pytest.fixture(scope="module")
def gateway() -> Iterator[GatewayProcess]:
    tokens = default_tokens()
    tokens["config"] = ",".join(ROTATED)
    tokens["stats"] = ",".join(STATS_ROTATED)
    # Two workers: a runtime change must reach both, and requests on fresh connections land on either.
    with start_gateway(workers=2, tokens=tokens) as process:
        yield process


def _fresh(gateway: GatewayProcess) -> httpx.Client:
    """A new connection each time, so consecutive checks are spread over the workers."""
    return gateway.client(headers={"Connection": "close"})


def _tools_list(
    gateway: GatewayProcess, endpoint: str, *, headers: dict[str, str] | None = None, params: dict | None = None
) -> httpx.Response:
    with _fresh(gateway) as http:
        sent = {"MCP-Protocol-Version": "2025-06-18", **(headers or {})}
        return http.post(f"/mcp/{endpoint}", json=rpc_body("tools/list"), headers=sent, params=params)


def _assert_allowed(response: httpx.Response) -> None:
    assert response.status_code == 200, response.text
    assert isinstance(response.json()["result"]["tools"], list)


def _assert_refused(response: httpx.Response, gateway: GatewayProcess) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"].lower().startswith("bearer")
    answer = response.json()
    assert answer["jsonrpc"] == "2.0" and answer["error"]["code"] == -32001
    for token in (*gateway.tokens.values(), *ROTATED, *STATS_ROTATED):
        assert token not in response.text


def _eventually(check: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + PROPAGATION_S
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_own_token_opens_the_endpoint(gateway: GatewayProcess, endpoint: str) -> None:
    _assert_allowed(_tools_list(gateway, endpoint, headers=_bearer(gateway.tokens[endpoint])))


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_every_other_endpoints_token_is_refused(gateway: GatewayProcess, endpoint: str) -> None:
    for other in ENDPOINTS:
        if other != endpoint:
            _assert_refused(_tools_list(gateway, endpoint, headers=_bearer(gateway.tokens[other])), gateway)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_missing_and_malformed_credentials_are_refused(gateway: GatewayProcess, endpoint: str) -> None:
    token = gateway.tokens[endpoint]
    malformed = [
        {},
        {"Authorization": ""},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer ,"},
        {"Authorization": token},  # no scheme
        {"Authorization": f"Basic {token}"},
        {"Authorization": f"Bearer {token}x"},
        {"Authorization": f"Bearer {token[:-1]}"},
        {"Authorization": f"Bearer {token.upper()}"},
        {"Authorization": f"Bearer {token} {token}"},
    ]
    for headers in malformed:
        _assert_refused(_tools_list(gateway, endpoint, headers=headers), gateway)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_query_token_refused_while_disabled(gateway: GatewayProcess, endpoint: str) -> None:
    _assert_refused(_tools_list(gateway, endpoint, params={"token": gateway.tokens[endpoint]}), gateway)


def test_both_rotated_tokens_open_config_only(gateway: GatewayProcess) -> None:
    for token in ROTATED:
        for _ in range(3):
            _assert_allowed(_tools_list(gateway, "config", headers=_bearer(token)))
        for other in ENDPOINTS:
            if other != "config":
                _assert_refused(_tools_list(gateway, other, headers=_bearer(token)), gateway)
    _assert_refused(_tools_list(gateway, "config", headers=_bearer(",".join(ROTATED))), gateway)


def test_query_token_when_enabled_then_disabled_again(gateway: GatewayProcess) -> None:
    with _fresh(gateway) as http:
        set_ = call_tool(http, gateway, "config", "set_config", {"variable_name": "mcp-allow_query_token", "value": "true"})
    # set_config answers once every worker serves the change: no call after it may see the old value
    assert set_["structuredContent"]["workers_applied"] == set_["structuredContent"]["workers"] == 2, set_
    try:
        # every worker must take the change: several fresh connections in a row must all pass
        def all_pass() -> bool:
            return all(
                _tools_list(gateway, "stats", params={"token": gateway.tokens["stats"]}).status_code == 200 for _ in range(4)
            )

        assert _eventually(all_pass)
        for endpoint in ENDPOINTS:
            _assert_allowed(_tools_list(gateway, endpoint, params={"token": gateway.tokens[endpoint]}))
            other = "stats" if endpoint != "stats" else "config"
            _assert_refused(_tools_list(gateway, endpoint, params={"token": gateway.tokens[other]}), gateway)
            # a bad header is not rescued by a good query token
            headers = {"Authorization": f"Bearer {gateway.tokens[other]}"}
            _assert_refused(_tools_list(gateway, endpoint, headers=headers, params={"token": gateway.tokens[endpoint]}), gateway)
    finally:
        with _fresh(gateway) as http:
            call_tool(http, gateway, "config", "set_config", {"variable_name": "mcp-allow_query_token", "value": "false"})

    def all_refused() -> bool:
        return all(_tools_list(gateway, "stats", params={"token": gateway.tokens["stats"]}).status_code == 401 for _ in range(4))

    assert _eventually(all_refused)


def test_removed_rotated_token_stops_working_in_every_worker(gateway: GatewayProcess) -> None:
    old, new = ROTATED
    with _fresh(gateway) as http:
        result = call_tool(
            http, gateway, "config", "set_config", {"variable_name": "mcp-config_endpoint_auth", "value": new}, token=old
        )
    assert result["isError"] is False, result
    assert old not in str(result) and new not in str(result)  # the secret is masked in the answer

    def old_refused_everywhere() -> bool:
        return all(_tools_list(gateway, "config", headers=_bearer(old)).status_code == 401 for _ in range(6))

    assert _eventually(old_refused_everywhere)
    _assert_refused(_tools_list(gateway, "config", headers=_bearer(old)), gateway)
    for _ in range(6):
        _assert_allowed(_tools_list(gateway, "config", headers=_bearer(new)))
    gateway.tokens["config"] = new


def test_admin_set_and_load_removes_a_rotated_token(gateway: GatewayProcess) -> None:
    """The ProxySQL way: SET in memory changes nothing yet; LOAD MCP VARIABLES TO RUNTIME applies it everywhere."""
    old, new = STATS_ROTATED
    with _fresh(gateway) as http:
        result = call_tool(http, gateway, "admin", "admin.sql", {"statement": f"SET mcp-stats_endpoint_auth = '{new}'"})
        assert result["isError"] is False, result
        time.sleep(1.0)  # longer than the workers' runtime poll: memory edits must not leak into runtime
        for _ in range(4):
            _assert_allowed(_tools_list(gateway, "stats", headers=_bearer(old)))
        result = call_tool(http, gateway, "admin", "admin.sql", {"statement": "LOAD MCP VARIABLES TO RUNTIME"})
        assert result["isError"] is False, result

    def old_refused_everywhere() -> bool:
        return all(_tools_list(gateway, "stats", headers=_bearer(old)).status_code == 401 for _ in range(6))

    assert _eventually(old_refused_everywhere)
    for _ in range(6):
        _assert_allowed(_tools_list(gateway, "stats", headers=_bearer(new)))
    gateway.tokens["stats"] = new


def test_an_invalid_token_value_is_refused_and_nothing_changes(gateway: GatewayProcess) -> None:
    with _fresh(gateway) as http:
        result = call_tool(http, gateway, "config", "set_config", {"variable_name": "mcp-stats_endpoint_auth", "value": "short"})
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "INVALID_ARGUMENT"
    time.sleep(1.5)
    _assert_allowed(_tools_list(gateway, "stats", headers=_bearer(gateway.tokens["stats"])))


def test_refusals_are_counted_in_metrics_without_tokens(gateway: GatewayProcess) -> None:
    with _fresh(gateway) as http:
        post_rpc(http, gateway, "stats", "ping", token="wrong-token-0123456789")
        text = http.get("/metrics").text
    assert "auth" in text
    for token in (*gateway.tokens.values(), *ROTATED, *STATS_ROTATED, "wrong-token-0123456789"):
        assert token not in text
