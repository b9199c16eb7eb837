"""The gateway as an OAuth 2.1 resource server, against a real OpenID provider on loopback.

npm `oidc-provider` (tests/oauth/oidc.py) issues RFC 9068 JWT access tokens with the RFC 8707
resource as audience. The gateway (2 workers) accepts them beside its static tokens: Protected
Resource Metadata (RFC 9728) per endpoint and at the root, `WWW-Authenticate` with
`resource_metadata` on a 401, `insufficient_scope` on a 403. The attack matrix sends each forged
or misdirected token with a `set_config` call that would change the runtime: every case is
refused (401/403, a JSON-RPC error, the challenge) and the runtime is unchanged afterwards.
The official MCP SDK's OAuth client does the whole dance from the 401.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from server_process import GatewayProcess, call_tool, rpc_body, start_gateway

from oauth.oidc import REDIRECT_URI, OidcProvider

PAGE_SIZE = "mcp-tools_page_size"  # what the attack matrix's call would change


@pytest.fixture(scope="module")
def gateway(provider: OidcProvider) -> Iterator[GatewayProcess]:
    variables = {
        "mcp-oauth_issuer": provider.issuer,
        "mcp-oauth_tool_scopes": "config/set_config=mcp:write",
        "mcp-oauth_claims": "email,tenant,groups",
    }
    with start_gateway(workers=2, variables=variables) as process:
        yield process


def _post(gateway: GatewayProcess, endpoint: str, token: str | None, body: dict[str, Any]) -> httpx.Response:
    headers = {"MCP-Protocol-Version": "2025-06-18", "Connection": "close"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    with gateway.client() as http:
        return http.post(f"/mcp/{endpoint}", json=body, headers=headers)


def _set_page_size(value: int) -> dict[str, Any]:
    return rpc_body("tools/call", {"name": "set_config", "arguments": {"variable_name": PAGE_SIZE, "value": str(value)}})


def _page_size(gateway: GatewayProcess) -> str:
    with gateway.client() as http:
        result = call_tool(http, gateway, "config", "get_config", {"variable_name": PAGE_SIZE})
    return result["structuredContent"]["value"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _hs256_with_public_key(provider: OidcProvider, claims: dict[str, Any]) -> str:
    """The classic key-confusion forgery: HMAC-SHA256 keyed with the issuer's public key (PEM)."""
    public_pem = provider.private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    head = _b64(json.dumps({"alg": "HS256", "typ": "at+jwt", "kid": provider.kid}).encode())
    body = _b64(json.dumps({"iss": provider.issuer, "sub": "alice", "exp": int(time.time()) + 300, **claims}).encode())
    signature = hmac.new(public_pem, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(signature)}"


def _tampered(token: str) -> str:
    head, body, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["sub"] = "mallory"
    claims["scope"] = claims["scope"] + " mcp:write"
    return f"{head}.{_b64(json.dumps(claims).encode())}.{signature}"


def test_protected_resource_metadata(gateway: GatewayProcess, provider: OidcProvider) -> None:
    with gateway.client() as http:
        for endpoint in ("config", "rag", "query"):
            answer = http.get(f"/.well-known/oauth-protected-resource/mcp/{endpoint}")
            assert answer.status_code == 200, answer.text
            meta = answer.json()
            assert meta["resource"] == gateway.url(endpoint)
            assert meta["authorization_servers"] == [provider.issuer]
            assert f"mcp:{endpoint}" in meta["scopes_supported"]
            assert meta["bearer_methods_supported"] == ["header"]
        assert "mcp:write" in http.get("/.well-known/oauth-protected-resource/mcp/config").json()["scopes_supported"]
        root = http.get("/.well-known/oauth-protected-resource").json()
        assert root["resource"] == gateway.base_url and root["authorization_servers"] == [provider.issuer]
        assert http.get("/.well-known/oauth-protected-resource/mcp/nope").status_code == 404


def test_401_points_at_the_metadata(gateway: GatewayProcess) -> None:
    answer = _post(gateway, "rag", None, rpc_body("tools/list"))
    assert answer.status_code == 401
    challenge = answer.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert f'resource_metadata="{gateway.base_url}/.well-known/oauth-protected-resource/mcp/rag"' in challenge
    assert 'scope="mcp:rag"' in challenge
    assert answer.json()["error"]["code"] == -32001


def test_static_token_clients_see_no_oauth(gateway_server: GatewayProcess) -> None:
    """OAuth off (the default): no metadata, no resource_metadata, so no client starts OAuth."""
    with gateway_server.client() as http:
        assert http.get("/.well-known/oauth-protected-resource/mcp/rag").status_code == 404
        assert http.get("/.well-known/oauth-protected-resource").status_code == 404
    answer = _post(gateway_server, "rag", None, rpc_body("tools/list"))
    assert answer.status_code == 401 and "resource_metadata" not in answer.headers["www-authenticate"]


def test_access_token_and_static_token_both_open_the_endpoint(gateway: GatewayProcess, provider: OidcProvider) -> None:
    token = provider.token("alice", gateway.url("config"), "mcp:config")
    for _ in range(3):  # fresh connections: both workers
        answer = _post(
            gateway, "config", token, rpc_body("tools/call", {"name": "get_config", "arguments": {"variable_name": PAGE_SIZE}})
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"]["isError"] is False
    assert _post(gateway, "config", gateway.tokens["config"], rpc_body("tools/list")).status_code == 200


def test_attack_matrix(gateway: GatewayProcess, provider: OidcProvider) -> None:
    before = _page_size(gateway)
    config_url = gateway.url("config")
    now = int(time.time())
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    good_scopes = "mcp:config mcp:write"
    real_for_rag = provider.token("alice", gateway.url("rag"), "mcp:rag mcp:config mcp:write")
    real_for_config = provider.token("alice", config_url, good_scopes)
    without_write = provider.token("alice", config_url, "mcp:config")
    import jwt

    cases: dict[str, tuple[str, int, str]] = {
        "alg none": (
            jwt.encode(
                {"iss": provider.issuer, "sub": "alice", "aud": config_url, "exp": now + 300, "scope": good_scopes},
                None,
                algorithm="none",
            ),
            401,
            "invalid_token",
        ),
        "HS256 keyed with the issuer's public key": (
            _hs256_with_public_key(provider, {"aud": config_url, "scope": good_scopes}),
            401,
            "invalid_token",
        ),
        "wrong issuer": (
            provider.mint({"iss": "http://127.0.0.1:1", "aud": config_url, "scope": good_scopes}),
            401,
            "invalid_token",
        ),
        "a real token for another endpoint (/mcp/rag)": (real_for_rag, 401, "invalid_token"),
        "a token for another server": (
            provider.mint({"aud": "https://elsewhere.example/mcp/config", "scope": good_scopes}),
            401,
            "invalid_token",
        ),
        "expired": (provider.mint({"aud": config_url, "scope": good_scopes, "exp": now - 120}), 401, "invalid_token"),
        "not yet valid": (provider.mint({"aud": config_url, "scope": good_scopes, "nbf": now + 120}), 401, "invalid_token"),
        "unknown kid": (
            provider.mint({"aud": config_url, "scope": good_scopes}, headers={"kid": "not-the-issuers"}, key=stranger),
            401,
            "invalid_token",
        ),
        "the issuer's kid, another key": (
            provider.mint({"aud": config_url, "scope": good_scopes}, key=stranger),
            401,
            "invalid_token",
        ),
        "tampered payload": (_tampered(without_write), 401, "invalid_token"),
        "no audience": (provider.mint({"scope": good_scopes}), 401, "invalid_token"),
        "very large token": (provider.mint({"aud": config_url, "scope": good_scopes, "pad": "x" * 20_000}), 401, "invalid_token"),
        "not a JWT": ("x" * 40, 401, "invalid_token"),
        "the endpoint's scope not granted": (provider.mint({"aud": config_url, "scope": "mcp:rag"}), 403, "insufficient_scope"),
        "the tool's scope not granted": (without_write, 403, "insufficient_scope"),
    }
    for name, (token, status, error) in cases.items():
        answer = _post(gateway, "config", token, _set_page_size(7))
        assert answer.status_code == status, (name, answer.status_code, answer.text)
        challenge = answer.headers["www-authenticate"]
        assert f'error="{error}"' in challenge, (name, challenge)
        assert "resource_metadata=" in challenge, name
        assert answer.json()["error"]["code"] == -32001, name
        assert token not in answer.text and token not in challenge, name
    assert _page_size(gateway) == before  # nothing ran
    # the same real token with the tool's scope does run it: the matrix was refused for its reasons
    assert _post(gateway, "config", real_for_config, _set_page_size(int(before) + 1)).json()["result"]["isError"] is False
    assert _page_size(gateway) == str(int(before) + 1)
    assert _post(gateway, "config", real_for_config, _set_page_size(int(before))).status_code == 200


def test_jwks_down_fails_closed_quickly(gateway: GatewayProcess, provider: OidcProvider) -> None:
    dead = "http://127.0.0.1:9/jwks"  # discard port: nothing listens
    with gateway.client() as http:
        assert (
            call_tool(http, gateway, "config", "set_config", {"variable_name": "mcp-oauth_jwks_url", "value": dead})["isError"]
            is False
        )
    try:
        token = provider.mint({"aud": gateway.url("config"), "scope": "mcp:config"})
        for _ in range(4):
            started = time.monotonic()
            answer = _post(gateway, "config", token, rpc_body("tools/list"))
            assert time.monotonic() - started < 5.0
            assert answer.status_code == 401, answer.text
            assert "keys" in answer.json()["error"]["message"]
    finally:
        with gateway.client() as http:
            call_tool(http, gateway, "config", "set_config", {"variable_name": "mcp-oauth_jwks_url", "value": ""})
    deadline = time.monotonic() + 20  # the keys are fetched again (at most every 10 s per worker)
    token = provider.mint({"aud": gateway.url("config"), "scope": "mcp:config"})
    while _post(gateway, "config", token, rpc_body("tools/list")).status_code != 200:
        assert time.monotonic() < deadline, "the gateway did not recover once the JWKS was back"
        time.sleep(0.5)


class _Memory:
    def __init__(self) -> None:
        self.tokens: Any = None
        self.client_info: Any = None

    async def get_tokens(self) -> Any:
        return self.tokens

    async def set_tokens(self, tokens: Any) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> Any:
        return self.client_info

    async def set_client_info(self, client_info: Any) -> None:
        self.client_info = client_info


def test_official_sdk_oauth_client(gateway: GatewayProcess, provider: OidcProvider) -> None:
    """The MCP SDK's OAuth client: 401 -> resource metadata -> authorization server metadata ->
    dynamic registration -> authorization code with PKCE (login driven here) -> token -> tools."""
    from mcp import Client
    from mcp.client.auth import OAuthClientProvider
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

    async def scenario(endpoint: str, user: str) -> list[str]:
        redirected: dict[str, str] = {}

        async def redirect_handler(url: str) -> None:
            redirected.update(await anyio.to_thread.run_sync(provider.authorize, url, user))

        async def callback_handler() -> AuthorizationCodeResult:
            return AuthorizationCodeResult(code=redirected["code"], state=redirected.get("state"), iss=redirected.get("iss"))

        auth = OAuthClientProvider(
            server_url=gateway.url(endpoint),
            client_metadata=OAuthClientMetadata(
                client_name="gateway test",
                redirect_uris=[REDIRECT_URI],
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                token_endpoint_auth_method="none",
                application_type="native",
            ),
            storage=_Memory(),
            redirect_handler=redirect_handler,
            callback_handler=callback_handler,
        )
        async with (
            httpx2.AsyncClient(auth=auth, verify=gateway.ssl_context(), timeout=httpx2.Timeout(20.0)) as http,
            Client(streamable_http_client(gateway.url(endpoint), http_client=http), mode="auto", raise_exceptions=True) as client,
        ):
            names = [tool.name for tool in (await client.list_tools()).tools]
            tool = "list_targets" if endpoint == "query" else "rag.admin.stats"
            result = await client.call_tool(tool, {})
            assert result.is_error is False, result
        assert redirected["code"] and auth.context.current_tokens is not None
        import jwt

        claims = jwt.decode(auth.context.current_tokens.access_token, options={"verify_signature": False})
        assert claims["aud"] == gateway.url(endpoint) and claims["sub"] == user
        return names

    assert "list_targets" in anyio.run(scenario, "query", "alice")
    assert anyio.run(scenario, "rag", "bob")


def test_the_audit_trail_names_the_subject(gateway: GatewayProcess, provider: OidcProvider) -> None:
    token = provider.token("bob", gateway.url("config"), "mcp:config mcp:write")
    answer = _post(gateway, "config", token, _set_page_size(int(_page_size(gateway))))
    assert answer.json()["result"]["isError"] is False, answer.text
    with gateway.client() as http:
        result = call_tool(
            http,
            gateway,
            "admin",
            "admin.sql",
            {"statement": "SELECT subject, token_fingerprint, action FROM mcp_audit_log ORDER BY id DESC LIMIT 1"},
        )
    assert result["isError"] is False, result
    text = json.dumps(result["structuredContent"])
    assert "bob" in text and "set_config" in text, text
    assert token not in text
