"""DNS rebinding: the Host and Origin of every request are checked, on every path, before anything else.

A web page whose DNS name resolves to 127.0.0.1 can make the user's browser talk to a gateway
bound to loopback; the request then carries that page's Host and Origin. The gateway refuses a
Host that is not a loopback name (421, unless mcp-allowed_hosts lists it) and a present Origin
that is not a loopback origin (403, unless mcp-allowed_origins lists it), with a JSON-RPC error
body, counted in mcp_gateway_host_origin_refusals_total. Bound to a non-loopback address with
mcp-allowed_hosts empty, any Host is accepted (documented); listing hosts turns the check on.

The matrix runs on every MCP endpoint, /healthz, /metrics and an unknown path.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from server_process import GatewayProcess, post_rpc, registered_endpoints, start_gateway

ALLOWED_HOST = "gateway.internal.example"
ALLOWED_ORIGIN = "https://agent.example"


@pytest.fixture(scope="module")
def gateway() -> Iterator[GatewayProcess]:
    variables = {"mcp-allowed_hosts": ALLOWED_HOST, "mcp-allowed_origins": ALLOWED_ORIGIN}
    with start_gateway(variables=variables) as process:
        yield process


def _port(gateway: GatewayProcess) -> int:
    return int(gateway.base_url.rsplit(":", 1)[1])


def host_cases(port: int) -> list[tuple[str, int]]:
    """(Host header, expected status) for a gateway bound to 127.0.0.1 that also allows ALLOWED_HOST."""
    return [
        (f"127.0.0.1:{port}", 200),
        ("127.0.0.1", 200),
        (f"localhost:{port}", 200),
        ("localhost", 200),
        (f"LocalHost:{port}", 200),  # host names are case-insensitive
        (f"[::1]:{port}", 200),
        ("[::1]", 200),
        (f"{ALLOWED_HOST}:{port}", 200),
        (ALLOWED_HOST, 200),
        ("evil.example", 421),
        (f"evil.example:{port}", 421),
        (f"localhost.evil.example:{port}", 421),
        ("127.0.0.1.nip.io", 421),
        (f"sub.{ALLOWED_HOST}", 421),
        ("127.0.0.2", 421),  # loopback too, but not a name the browser's same-origin policy ties to this server
        ("[::1]evil", 421),
        ("localhost:notaport", 421),
        ("evil.example@localhost", 421),
    ]


ORIGIN_CASES: list[tuple[str, int]] = [
    ("http://localhost", 200),
    ("http://localhost:3000", 200),
    ("https://127.0.0.1:8443", 200),
    ("http://[::1]:5173", 200),
    (ALLOWED_ORIGIN, 200),
    ("https://evil.example", 403),
    ("http://localhost.evil.example", 403),
    ("https://agent.example.evil.example", 403),
    ("https://agent.example:444", 403),
    ("null", 403),  # sandboxed iframes and file:// pages
    ("file://", 403),
]


def _request(http: httpx.Client, gateway: GatewayProcess, path: str, headers: dict[str, str]) -> httpx.Response:
    if path.startswith("/mcp/"):
        endpoint = path.removeprefix("/mcp/")
        return post_rpc(http, gateway, endpoint, "ping", headers=headers)
    return http.get(path, headers=headers)


def _paths() -> list[str]:
    return [f"/mcp/{endpoint}" for endpoint in registered_endpoints()] + ["/healthz", "/metrics", "/no/such/path"]


def _expected_ok(path: str) -> int:
    return 404 if path == "/no/such/path" else 200


def _assert_refusal(response: httpx.Response, status: int, what: str) -> None:
    assert response.status_code == status, (what, response.status_code, response.text)
    answer = response.json()
    assert answer["jsonrpc"] == "2.0" and answer["id"] is None, answer
    assert answer["error"]["code"] == -32600 and answer["error"]["data"]["code"] == "UNAUTHORIZED", answer
    assert what.split(":")[0] in answer["error"]["message"], answer  # names what was refused: Host or Origin


def test_host_matrix_on_every_path(gateway: GatewayProcess) -> None:
    with gateway.client() as http:
        for path in _paths():
            for host, status in host_cases(_port(gateway)):
                response = _request(http, gateway, path, {"Host": host})
                if status == 200:
                    assert response.status_code == _expected_ok(path), (path, host, response.status_code, response.text)
                else:
                    _assert_refusal(response, status, f"Host: {path} {host}")


def test_origin_matrix_on_every_path(gateway: GatewayProcess) -> None:
    with gateway.client() as http:
        for path in _paths():
            for origin, status in ORIGIN_CASES:
                response = _request(http, gateway, path, {"Origin": origin})
                if status == 200:
                    assert response.status_code == _expected_ok(path), (path, origin, response.status_code, response.text)
                else:
                    _assert_refusal(response, status, f"Origin: {path} {origin}")
            # A preflight from a foreign page is refused too; from a loopback page it is answered.
            if path.startswith("/mcp/"):
                assert http.options(path, headers={"Origin": "https://evil.example"}).status_code == 403
                assert http.options(path, headers={"Origin": "http://localhost:3000"}).status_code == 204


def test_foreign_origin_is_refused_even_when_the_allowed_list_is_empty() -> None:
    """Before, an empty mcp-allowed_origins allowed every Origin: exactly the rebinding case."""
    with start_gateway() as gateway, gateway.client() as http:
        refused = post_rpc(http, gateway, "config", "ping", headers={"Origin": "https://evil.example"})
        _assert_refusal(refused, 403, "Origin")
        refused = post_rpc(http, gateway, "config", "ping", headers={"Host": "evil.example"})
        _assert_refusal(refused, 421, "Host")
        assert post_rpc(http, gateway, "config", "ping", headers={"Origin": "http://localhost:8080"}).status_code == 200
        # Counted, by reason and endpoint.
        metrics = http.get("/metrics").text
        assert _sample(metrics, "mcp_gateway_host_origin_refusals_total", endpoint="config", reason="origin") == 1
        assert _sample(metrics, "mcp_gateway_host_origin_refusals_total", endpoint="config", reason="host") == 1


def test_refusals_are_counted_per_endpoint(gateway: GatewayProcess) -> None:
    with gateway.client() as http:
        before = _sample(http.get("/metrics").text, "mcp_gateway_host_origin_refusals_total", endpoint="query", reason="host")
        for _ in range(3):
            assert post_rpc(http, gateway, "query", "ping", headers={"Host": "evil.example"}).status_code == 421
        after = _sample(http.get("/metrics").text, "mcp_gateway_host_origin_refusals_total", endpoint="query", reason="host")
    assert after - before == 3


def test_non_loopback_bind_accepts_any_host_unless_hosts_are_listed() -> None:
    with start_gateway(host="0.0.0.0") as gateway, gateway.client() as http:
        assert post_rpc(http, gateway, "config", "ping", headers={"Host": "gateway.example.net"}).status_code == 200
        refused = post_rpc(http, gateway, "config", "ping", headers={"Origin": "https://evil.example"})
        _assert_refusal(refused, 403, "Origin")  # Origin is checked whatever the bind
    with (
        start_gateway(host="0.0.0.0", variables={"mcp-allowed_hosts": "gateway.example.net"}) as gateway,
        gateway.client() as http,
    ):
        assert post_rpc(http, gateway, "config", "ping", headers={"Host": "gateway.example.net:443"}).status_code == 200
        assert post_rpc(http, gateway, "config", "ping", headers={"Host": f"localhost:{_port(gateway)}"}).status_code == 200
        _assert_refusal(post_rpc(http, gateway, "config", "ping", headers={"Host": "evil.example"}), 421, "Host")


def _sample(exposition: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in exposition.splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match and all(f'{k}="{v}"' in match.group(1) for k, v in labels.items()):
            total += float(match.group(2))
    return total
