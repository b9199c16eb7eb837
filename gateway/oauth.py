"""OAuth 2.1 resource server: validate access tokens (JWTs) issued by the organisation's
authorization server, beside the static bearer tokens (gateway.auth).

What is checked, in order, and refused with 401 `invalid_token` (nothing runs): the token's size
(mcp-oauth_max_token_bytes); its header's `alg`, which must be one an admin allows
(mcp-oauth_algorithms: asymmetric only, never `none`, never HMAC — so a token signed with the
issuer's public key as an HMAC secret is refused before any key is looked at); its `kid`, which
must name a key of the issuer's JWKS (fetched from mcp-oauth_jwks_url or found by discovery from
mcp-oauth_issuer, cached for mcp-oauth_jwks_cache_s, refetched at most every
JWKS_MIN_REFRESH_S when an unknown `kid` arrives, bounded in size and time); the signature; `iss`;
`exp`/`nbf` with mcp-oauth_leeway_s; `aud` containing this endpoint's canonical URL (RFC 8707:
a token minted for /mcp/rag is refused on /mcp/admin and on another server). Then the scopes:
an endpoint needs its scopes (default `mcp:<endpoint>`, mcp-oauth_endpoint_scopes), a tool may
need more (mcp-oauth_tool_scopes); a token lacking one gets 403 `insufficient_scope`.

A JWKS endpoint that is down fails closed: 401 with a clear description, within the fetch
timeout. Validated tokens are remembered per worker (bounded, until they expire, at most
VALIDATED_TTL_S) so the signature is checked once per token, not once per call.

Protected Resource Metadata (RFC 9728) is built here; gateway.app serves it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from gateway.call import Caller
from gateway.host_guard import LOOPBACK_HOSTS, host_name
from gateway.runtime import Runtime
from gateway.tokens import fingerprint

if TYPE_CHECKING:
    import jwt

log = logging.getLogger("mcp_gateway.oauth")

JWKS_MIN_REFRESH_S = 10.0  # an unknown kid refetches the JWKS at most this often (no fetch storm)
JWKS_MAX_BYTES = 512 * 1024
VALIDATED_TTL_S = 300.0
VALIDATED_MAX = 4096
PRM_PREFIX = "/.well-known/oauth-protected-resource"


class OAuthRefusal(Exception):
    """A token refused: `status` 401 (invalid_token) or 403 (insufficient_scope), a `reason`
    (metric label) and a `description` safe to show (never the token)."""

    def __init__(self, status: int, error: str, reason: str, description: str, scope: str = "") -> None:
        super().__init__(description)
        self.status, self.error, self.reason, self.description, self.scope = status, error, reason, description, scope


class KeysNeeded(Exception):
    """The JWKS is not loaded or lacks the token's kid: refresh it (in a thread), then retry."""


def _items(value: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """`name=scope scope` items -> {name: (scope, ...)}."""
    table: dict[str, tuple[str, ...]] = {}
    for item in value:
        name, _, scopes = item.partition("=")
        table[name.strip()] = tuple(scopes.split())
    return table


@dataclass(frozen=True)
class OAuthConfig:
    """The OAuth variables of one runtime, parsed once."""

    issuer: str
    jwks_url: str
    endpoints: frozenset[str]  # "*": every endpoint
    algorithms: tuple[str, ...]
    leeway_s: int
    resource_url: str
    endpoint_scopes: Mapping[str, tuple[str, ...]]
    tool_scopes: Mapping[str, tuple[str, ...]]
    subject_claim: str
    carried_claims: tuple[str, ...]
    jwks_cache_s: int
    http_timeout_s: float
    max_token_bytes: int
    use_ssl: bool

    @classmethod
    def of(cls, runtime: Runtime) -> OAuthConfig:
        v = runtime.variables
        return cls(
            issuer=v["mcp-oauth_issuer"].rstrip("/") if v["mcp-oauth_issuer"] else "",
            jwks_url=v["mcp-oauth_jwks_url"],
            endpoints=frozenset(v["mcp-oauth_endpoints"]),
            algorithms=v["mcp-oauth_algorithms"],
            leeway_s=v["mcp-oauth_leeway_s"],
            resource_url=v["mcp-oauth_resource_url"].rstrip("/"),
            endpoint_scopes=_items(v["mcp-oauth_endpoint_scopes"]),
            tool_scopes=_items(v["mcp-oauth_tool_scopes"]),
            subject_claim=v["mcp-oauth_subject_claim"],
            carried_claims=v["mcp-oauth_claims"],
            jwks_cache_s=v["mcp-oauth_jwks_cache_s"],
            http_timeout_s=v["mcp-oauth_http_timeout_ms"] / 1000,
            max_token_bytes=v["mcp-oauth_max_token_bytes"],
            use_ssl=v["mcp-use_ssl"],
        )

    def enabled_for(self, endpoint: str) -> bool:
        return bool(self.issuer) and ("*" in self.endpoints or endpoint in self.endpoints)

    def scopes_for(self, endpoint: str) -> tuple[str, ...]:
        """The scopes every call on the endpoint needs (default `mcp:<endpoint>`)."""
        scopes = self.endpoint_scopes.get(endpoint)
        return (f"mcp:{endpoint}",) if scopes is None else scopes

    def scopes_for_tool(self, endpoint: str, tool: str) -> tuple[str, ...]:
        """Further scopes a tool needs (`endpoint/tool=scope ...`; dotted or portable spelling)."""
        if not self.tool_scopes:
            return ()
        return self.tool_scopes.get(f"{endpoint}/{tool}") or self.tool_scopes.get(f"{endpoint}/{tool.replace('_', '.', 1)}") or ()

    def base_url(self, host: str | None) -> str | None:
        """The gateway's public base URL: mcp-oauth_resource_url, else scheme://Host when the Host
        is one the host guard enforces (loopback or mcp-allowed_hosts): never a Host an attacker
        chose, which would make a token minted for another server look like ours."""
        if self.resource_url:
            return self.resource_url
        return None if host is None else f"{'https' if self.use_ssl else 'http'}://{host}"

    def resource(self, endpoint: str, host: str | None) -> str | None:
        base = self.base_url(host)
        return None if base is None else f"{base}/mcp/{endpoint}"

    def metadata_url(self, endpoint: str, host: str | None) -> str | None:
        base = self.base_url(host)
        return None if base is None else f"{base}{PRM_PREFIX}/mcp/{endpoint}"


_configs: tuple[object, OAuthConfig | None] = (None, None)


def config(runtime: Runtime) -> OAuthConfig:
    """The runtime's OAuth configuration, parsed once per runtime version."""
    global _configs
    if _configs[0] is not runtime or _configs[1] is None:
        _configs = (runtime, OAuthConfig.of(runtime))
    assert _configs[1] is not None
    return _configs[1]


def trusted_host(host: str | None, runtime: Runtime) -> str | None:
    """The request's Host when it may name our public URL: loopback, or listed in mcp-allowed_hosts."""
    if host is None:
        return None
    name = host_name(host)
    allowed = runtime.variables["mcp-allowed_hosts"]
    if name is None or not (name in LOOPBACK_HOSTS or (name in allowed and "*" not in allowed)):
        return None
    return host


@dataclass
class _Keys:
    source: str = ""  # the issuer/JWKS URL these keys came from
    by_kid: dict[str, jwt.PyJWK] = field(default_factory=dict)
    loaded_at: float = 0.0
    attempted_at: float = 0.0
    error: str = ""


class KeyStore:
    """The issuer's signing keys, per worker: fetched, cached, refreshed (bounded, rate-limited)."""

    def __init__(self) -> None:
        self._keys = _Keys()
        self._lock = threading.Lock()

    def key_for(self, kid: str | None, cfg: OAuthConfig) -> jwt.PyJWK:
        keys = self._keys
        source = cfg.jwks_url or cfg.issuer
        now = time.monotonic()
        fresh = keys.source == source and keys.loaded_at and now - keys.loaded_at < cfg.jwks_cache_s
        if not fresh:
            if keys.source == source and now - keys.attempted_at < JWKS_MIN_REFRESH_S and keys.error:
                raise OAuthRefusal(401, "invalid_token", "jwks_unavailable", f"the issuer's keys are unavailable: {keys.error}")
            raise KeysNeeded
        if kid is None:
            if len(keys.by_kid) == 1:
                return next(iter(keys.by_kid.values()))
            raise OAuthRefusal(401, "invalid_token", "unknown_kid", "the token names no key (kid) and the issuer has several")
        key = keys.by_kid.get(kid)
        if key is None:
            if now - keys.attempted_at >= JWKS_MIN_REFRESH_S:
                raise KeysNeeded
            raise OAuthRefusal(401, "invalid_token", "unknown_kid", "the token's key (kid) is not one of the issuer's")
        return key

    def refresh(self, cfg: OAuthConfig) -> None:
        """Fetch the JWKS (blocking: run it in a thread). Rate-limited; errors are kept, not raised."""
        source = cfg.jwks_url or cfg.issuer
        with self._lock:
            now = time.monotonic()
            keys = self._keys
            if keys.source == source and now - keys.attempted_at < JWKS_MIN_REFRESH_S:
                return  # another request just fetched (or failed to)
            loaded = _Keys(source=source, attempted_at=now)
            try:
                loaded.by_kid = _fetch_keys(cfg)
                loaded.loaded_at = time.monotonic()
            except Exception as exc:  # noqa: BLE001 - any failure fails closed, with its reason
                loaded.error = str(exc)[:300] or type(exc).__name__
                loaded.by_kid = keys.by_kid if keys.source == source else {}
                loaded.loaded_at = 0.0
                log.warning("fetching the OAuth issuer's keys from %s failed: %s", source, loaded.error)
            self._keys = loaded

    def state(self) -> dict[str, Any]:
        keys = self._keys
        return {"source": keys.source, "keys": sorted(keys.by_kid), "error": keys.error}


def _get_json(client: httpx.Client, url: str) -> dict[str, Any]:
    with client.stream("GET", url, headers={"Accept": "application/json"}) as response:
        if response.status_code != 200:
            raise ValueError(f"GET {url} answered HTTP {response.status_code}")
        body = b""
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > JWKS_MAX_BYTES:
                raise ValueError(f"GET {url}: answer larger than {JWKS_MAX_BYTES} bytes")
    data = httpx.Response(200, content=body).json()
    if not isinstance(data, dict):
        raise ValueError(f"GET {url}: not a JSON object")
    return data


def discover(cfg: OAuthConfig, client: httpx.Client) -> dict[str, Any]:
    """The issuer's metadata (OIDC discovery, then RFC 8414), its `issuer` checked."""
    errors = []
    for suffix in ("/.well-known/openid-configuration", "/.well-known/oauth-authorization-server"):
        try:
            meta = _get_json(client, cfg.issuer + suffix)
        except (httpx.HTTPError, ValueError) as exc:
            errors.append(str(exc))
            continue
        if str(meta.get("issuer", "")).rstrip("/") != cfg.issuer:
            raise ValueError(f"the issuer's metadata names issuer {meta.get('issuer')!r}, not {cfg.issuer!r}")
        return meta
    raise ValueError("; ".join(errors) or "no issuer metadata")


def _check_transport(url: str) -> None:
    """Keys fetched in clear text could be anyone's: https, or http on loopback only."""
    parsed = httpx.URL(url)
    if parsed.scheme == "https":
        return
    if parsed.scheme == "http" and (parsed.host in LOOPBACK_HOSTS or parsed.host == "localhost"):
        return
    raise ValueError(f"{url[:200]}: the issuer's metadata and keys must come over https (http only on loopback)")


def _fetch_keys(cfg: OAuthConfig) -> dict[str, jwt.PyJWK]:
    import jwt  # here, not at the top: see Verifier._validate
    from jwt.exceptions import PyJWKError

    _check_transport(cfg.jwks_url or cfg.issuer)
    with httpx.Client(timeout=cfg.http_timeout_s, follow_redirects=False) as client:
        url = cfg.jwks_url
        if not url:
            url = str(discover(cfg, client).get("jwks_uri") or "")
            if not url:
                raise ValueError("the issuer's metadata has no jwks_uri")
        _check_transport(url)
        data = _get_json(client, url)
    keys: dict[str, jwt.PyJWK] = {}
    for item in data.get("keys") or []:
        if not isinstance(item, dict) or item.get("use", "sig") != "sig" or item.get("kty") == "oct":
            continue  # encryption keys and symmetric keys never verify a token
        try:
            key = jwt.PyJWK(item)
        except PyJWKError:
            continue
        keys[str(item.get("kid", ""))] = key
    if not keys:
        raise ValueError(f"{url} holds no usable signing key")
    return keys


class Verifier:
    """Validates access tokens for one worker (the keys and the validated-token memo are per worker)."""

    def __init__(self) -> None:
        self.keys = KeyStore()
        # (endpoint, host, token) -> (valid until, caller, its refusal on the endpoint or None)
        self._validated: dict[tuple[str, str | None, str], tuple[float, Caller, OAuthRefusal | None]] = {}
        self._validated_for: object = None

    def admit(self, token: str, endpoint: str, host: str | None, runtime: Runtime, cfg: OAuthConfig) -> Caller:
        """The caller a token names on `endpoint` (reached through the request's `host`), or raise
        OAuthRefusal / KeysNeeded. A token validated before on this endpoint and host answers from
        the memo (a dictionary lookup); endpoint scopes are checked here, tool scopes by `check_tool`."""
        if self._validated_for is not cfg:  # a new runtime: new issuer, audiences or scopes, perhaps
            self._validated, self._validated_for = {}, cfg
        memo_key = (endpoint, host, token)
        hit = self._validated.get(memo_key)
        if hit is not None and hit[0] > time.time():
            if hit[2] is not None:
                raise hit[2]
            return hit[1]
        resource = cfg.resource(endpoint, trusted_host(host, runtime))
        if resource is None:
            raise OAuthRefusal(
                401, "invalid_token", "no_resource_url", "this Host has no canonical URL: set mcp-oauth_resource_url"
            )
        caller, expires = self._validate(token, resource, cfg)
        refusal = None
        missing = [s for s in cfg.scopes_for(endpoint) if s not in caller.scopes]
        if missing:
            refusal = OAuthRefusal(
                403,
                "insufficient_scope",
                "insufficient_scope",
                f"the token lacks the scope(s) /mcp/{endpoint} needs: {' '.join(missing)}",
                scope=" ".join(cfg.scopes_for(endpoint)),
            )
        if len(self._validated) >= VALIDATED_MAX:
            self._validated.clear()
        self._validated[memo_key] = (min(expires, time.time() + VALIDATED_TTL_S), caller, refusal)
        if refusal is not None:
            raise refusal
        return caller

    def _validate(self, token: str, resource: str, cfg: OAuthConfig) -> tuple[Caller, float]:
        # PyJWT is imported at the first OAuth token, not with this module: it loads cryptography
        # (~10 MiB RSS in every worker, issue 30), and a gateway serving static tokens never uses it.
        import jwt
        from jwt.exceptions import (
            ExpiredSignatureError,
            ImmatureSignatureError,
            InvalidAudienceError,
            InvalidIssuerError,
            MissingRequiredClaimError,
            PyJWTError,
        )

        if len(token) > cfg.max_token_bytes:
            raise OAuthRefusal(401, "invalid_token", "token_too_large", f"the token exceeds {cfg.max_token_bytes} bytes")
        try:
            header = jwt.get_unverified_header(token)
        except PyJWTError:
            raise OAuthRefusal(401, "invalid_token", "invalid_token", "the token is not a valid JWT") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in cfg.algorithms:
            raise OAuthRefusal(
                401, "invalid_token", "algorithm_refused", f"the token's algorithm {str(alg)[:20]!r} is not allowed"
            )
        kid = header.get("kid")
        key = self.keys.key_for(kid if isinstance(kid, str) else None, cfg)
        declared = getattr(key, "_jwk_data", {}).get("alg")
        if declared and declared != alg:  # a key published for one algorithm verifies only that one
            raise OAuthRefusal(401, "invalid_token", "algorithm_refused", "the token's algorithm does not match its key's")
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=resource,
                issuer=cfg.issuer,
                leeway=cfg.leeway_s,
                options={"require": ["exp", "iss", "aud"], "verify_iat": False},
            )
        except ExpiredSignatureError:
            raise OAuthRefusal(401, "invalid_token", "expired", "the token has expired") from None
        except ImmatureSignatureError:
            raise OAuthRefusal(401, "invalid_token", "not_yet_valid", "the token is not valid yet (nbf)") from None
        except InvalidAudienceError:
            raise OAuthRefusal(
                401, "invalid_token", "wrong_audience", f"the token's audience is not this endpoint ({resource})"
            ) from None
        except InvalidIssuerError:
            raise OAuthRefusal(401, "invalid_token", "wrong_issuer", "the token's issuer is not the configured one") from None
        except MissingRequiredClaimError as exc:
            raise OAuthRefusal(401, "invalid_token", "invalid_token", f"the token lacks the {exc.claim!r} claim") from None
        except PyJWTError:
            raise OAuthRefusal(401, "invalid_token", "bad_signature", "the token's signature does not verify") from None
        subject = claims.get(cfg.subject_claim)
        if not isinstance(subject, (str, int)) or isinstance(subject, bool) or subject == "":
            raise OAuthRefusal(401, "invalid_token", "invalid_token", f"the token has no {cfg.subject_claim!r} claim")
        scope = claims.get("scope", claims.get("scp", ""))
        scopes = frozenset(scope.split() if isinstance(scope, str) else [s for s in scope if isinstance(s, str)])
        carried = {}
        for name in cfg.carried_claims:
            value = claims.get(name)
            if value is None:
                continue
            carried[name] = ",".join(map(str, value)) if isinstance(value, list) else str(value)
        caller = Caller(
            token_fingerprint=fingerprint(token),
            subject=str(subject)[:256],
            claims=carried,
            scopes=scopes,
            admitted="oauth",
        )
        return caller, float(claims["exp"])

    def check_tool(self, caller: Caller, endpoint: str, tool: str, cfg: OAuthConfig) -> None:
        needed = cfg.scopes_for_tool(endpoint, tool)
        missing = [s for s in needed if s not in caller.scopes]
        if missing:
            raise OAuthRefusal(
                403,
                "insufficient_scope",
                "insufficient_scope",
                f"the token lacks the scope(s) {tool} needs: {' '.join(missing)}",
                scope=" ".join((*cfg.scopes_for(endpoint), *needed)),
            )


def challenge(endpoint: str, cfg: OAuthConfig | None, host: str | None, refusal: OAuthRefusal | None = None) -> str:
    """The WWW-Authenticate value of a 401/403 (RFC 6750, RFC 9728 section 5.1). Without OAuth on
    the endpoint: no resource_metadata, so a static-token client starts no OAuth discovery."""
    parts = [f'realm="mcp-gateway/{endpoint}"']
    if cfg is not None and cfg.enabled_for(endpoint):
        url = cfg.metadata_url(endpoint, host)
        if url is not None:
            parts.append(f'resource_metadata="{url}"')
        scope = refusal.scope if refusal is not None and refusal.scope else " ".join(cfg.scopes_for(endpoint))
        if scope:
            parts.append(f'scope="{scope}"')
        if refusal is not None:
            description = refusal.description.replace("\\", "").replace('"', "'")
            parts.append(f'error="{refusal.error}", error_description="{description}"')
    return "Bearer " + ", ".join(parts)


def protected_resource_metadata(
    endpoint: str | None, endpoints: list[str], cfg: OAuthConfig, host: str | None
) -> dict[str, Any] | None:
    """RFC 9728 metadata for /mcp/<endpoint> (or, for None, the gateway's root), None when not served."""
    base = cfg.base_url(host)
    if base is None or not cfg.issuer:
        return None
    if endpoint is None:
        served = [e for e in endpoints if cfg.enabled_for(e)]
        if not served:
            return None
        resource = base
        scopes = sorted({s for e in served for s in cfg.scopes_for(e)})
    else:
        if not cfg.enabled_for(endpoint):
            return None
        resource = f"{base}/mcp/{endpoint}"
        scopes = sorted(
            {*cfg.scopes_for(endpoint), *(s for k, v in cfg.tool_scopes.items() if k.startswith(f"{endpoint}/") for s in v)}
        )
    return {
        "resource": resource,
        "authorization_servers": [cfg.issuer],
        "scopes_supported": scopes,
        "bearer_methods_supported": ["header"],
        "resource_name": f"MCP Gateway /mcp/{endpoint}" if endpoint else "MCP Gateway",
    }
