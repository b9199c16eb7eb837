"""A real OpenID provider on loopback for the OAuth tests: npm `oidc-provider`, run by Node.

`start_oidc_provider()` installs the package once into ~/.cache/mcp-gateway-tests/oidc (reused
by later runs; the tests skip with the reason only when npm cannot fetch it), starts
tests/oauth/oidc_provider.mjs on a free port with an RSA key made here, and yields an
`OidcProvider`: its issuer, `token(user, resource, scopes)` (a real authorization code grant
with PKCE, the login driven non-interactively) and `mint(claims, ...)` (a token signed with the
provider's own key, for the attack matrix).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

CACHE = Path(os.environ.get("MCP_GATEWAY_TEST_CACHE", Path.home() / ".cache" / "mcp-gateway-tests")) / "oidc"
PACKAGE = "oidc-provider@9"
SCRIPT = Path(__file__).with_name("oidc_provider.mjs")
CLIENT_ID = "gw-test-client"
REDIRECT_URI = "http://127.0.0.1:1/callback"  # never served: the code is read from the redirect
SCOPES = ["mcp:config", "mcp:query", "mcp:admin", "mcp:cache", "mcp:stats", "mcp:ai", "mcp:rag", "mcp:sql", "mcp:write"]
USERS = {
    "alice": {"email": "alice@example.test", "tenant": "north", "groups": ["analysts"]},
    "bob": {"email": "bob@example.test", "tenant": "south", "groups": ["interns"]},
}


def _ensure_package() -> None:
    if (CACHE / "node_modules" / "oidc-provider" / "package.json").exists():
        return
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node/npm are not installed: the OAuth tests need npm's oidc-provider")
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / "package.json").write_text('{"name": "mcp-gateway-test-oidc", "private": true, "type": "module"}\n')
    try:
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", PACKAGE], cwd=CACHE, check=True, capture_output=True, timeout=240
        )
    except (subprocess.SubprocessError, OSError) as exc:
        pytest.skip(f"npm could not install {PACKAGE} (registry unreachable?): {exc}")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class OidcProvider:
    issuer: str
    private_key: rsa.RSAPrivateKey
    kid: str
    process: subprocess.Popen[bytes] = field(repr=False)

    def mint(
        self, claims: dict[str, Any], *, headers: dict[str, Any] | None = None, key: Any = None, algorithm: str = "RS256"
    ) -> str:
        """A token signed with the provider's key (or `key`): the attack matrix's raw material."""
        now = int(time.time())
        body = {"iss": self.issuer, "sub": "alice", "iat": now, "exp": now + 300, "jti": secrets.token_hex(8), **claims}
        body = {k: v for k, v in body.items() if v is not None}
        head = {"kid": self.kid, "typ": "at+jwt", **(headers or {})}
        return jwt.encode(body, self.private_key if key is None else key, algorithm=algorithm, headers=head)

    def authorize(self, authorization_url: str, user: str) -> dict[str, str]:
        """Follow an authorization URL through the login (as `user`) to the redirect: its query."""
        url = authorization_url + ("&" if "?" in authorization_url else "?") + urlencode({"login_hint": user})
        with httpx.Client(timeout=10.0) as http:
            for _ in range(12):
                response = http.get(url)
                location = response.headers.get("location")
                if response.status_code not in (302, 303) or not location:
                    raise AssertionError(f"authorization stopped at {response.status_code}: {response.text[:500]}")
                url = str(httpx.URL(url).join(location))
                if url.startswith(REDIRECT_URI):
                    return {k: v[0] for k, v in parse_qs(urlparse(url).query).items()}
        raise AssertionError("authorization did not reach the redirect URI")

    def token(self, user: str, resource: str, scopes: str) -> str:
        """An access token for `resource`, by the authorization code grant with PKCE."""
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        state = secrets.token_urlsafe(12)
        query = urlencode(
            {
                "client_id": CLIENT_ID,
                "response_type": "code",
                "redirect_uri": REDIRECT_URI,
                "scope": scopes,
                "resource": resource,
                "state": state,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
            }
        )
        answer = self.authorize(f"{self.issuer}/auth?{query}", user)
        assert answer.get("state") == state and "code" in answer, answer
        with httpx.Client(timeout=10.0) as http:
            response = http.post(
                f"{self.issuer}/token",
                data={
                    "grant_type": "authorization_code",
                    "code": answer["code"],
                    "redirect_uri": REDIRECT_URI,
                    "client_id": CLIENT_ID,
                    "code_verifier": verifier,
                    "resource": resource,
                },
            )
        assert response.status_code == 200, response.text
        return response.json()["access_token"]


@contextlib.contextmanager
def start_oidc_provider() -> Iterator[OidcProvider]:
    _ensure_package()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    kid = f"k-{secrets.token_hex(4)}"
    jwk = json.loads(RSAAlgorithm.to_jwk(key))
    jwk.update({"kid": kid, "use": "sig", "alg": "RS256"})
    port = _free_port()
    issuer = f"http://127.0.0.1:{port}"
    client = {
        "client_id": CLIENT_ID,
        "token_endpoint_auth_method": "none",
        "redirect_uris": [REDIRECT_URI],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "application_type": "native",
    }
    config = {"port": port, "issuer": issuer, "jwks": {"keys": [jwk]}, "scopes": SCOPES, "users": USERS, "clients": [client]}
    with tempfile.TemporaryDirectory(prefix="mcpgw-oidc-") as tmp:
        config_path = Path(tmp) / "config.json"
        config_path.write_text(json.dumps(config))
        script = CACHE / SCRIPT.name  # beside its node_modules, so `import 'oidc-provider'` resolves
        shutil.copyfile(SCRIPT, script)
        log_path = Path(tmp) / "oidc.log"
        with open(log_path, "wb") as log_file:
            process = subprocess.Popen(
                ["node", str(script), str(config_path)], cwd=CACHE, stdout=log_file, stderr=subprocess.STDOUT
            )
        try:
            deadline = time.monotonic() + 30
            while b"READY" not in log_path.read_bytes():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"oidc-provider did not start: {log_path.read_text(errors='replace')[-2000:]}")
                time.sleep(0.05)
            yield OidcProvider(issuer=issuer, private_key=key, kid=kid, process=process)
        finally:
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
