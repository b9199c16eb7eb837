"""Bearer-token checks: one token variable per endpoint, several tokens for rotation.

No token configured means no entry (ProxySQL's empty-token bypass was CVE-2026-48774). Every
configured token is compared in constant time, all of them, so timing tells nothing about
which one nearly matched. `?token=` is honoured only when `mcp-allow_query_token` is on.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any, NamedTuple

from gateway import oauth
from gateway.call import Caller
from gateway.runtime import Runtime


def token_matches(presented: str, accepted: tuple[str, ...]) -> bool:
    matched = False
    presented_bytes = presented.encode()
    for token in accepted:
        matched |= hmac.compare_digest(presented_bytes, token.encode())
    return matched


def presented_token(authorization: str | None, query: Mapping[str, str], *, allow_query: bool) -> tuple[str | None, str]:
    """(token, how) — how is 'header', 'query', 'malformed' or 'missing'."""
    if authorization is not None:
        scheme, _, value = authorization.strip().partition(" ")
        value = value.strip()
        if scheme.lower() != "bearer" or not value:
            return None, "malformed"
        return value, "header"
    if allow_query and query.get("token"):
        return query["token"], "query"
    return None, "missing"


_toolset_tokens: list[Any] = [None, {}]  # (the runtime_mcp_endpoints rows, their tokens by endpoint)


def accepted_tokens(endpoint: str, runtime: Runtime) -> tuple[str, ...]:
    """The static bearer tokens an endpoint accepts, in one place: every way a caller is admitted
    by a static token asks here. A built-in endpoint's are its `mcp-<endpoint>_endpoint_auth`; an
    admin-defined endpoint's (a toolset, MCP TOOLS) its mcp_endpoints row's auth_tokens."""
    tokens = runtime.variables.get(f"mcp-{endpoint}_endpoint_auth")
    if tokens is not None:
        return tokens
    rows = runtime.table("runtime_mcp_endpoints")
    if _toolset_tokens[0] is not rows:
        _toolset_tokens[1] = {
            r["endpoint"]: tuple(t for t in (w.strip() for w in str(r.get("auth_tokens") or "").split(",")) if t)
            for r in rows
            if r.get("active")
        }
        _toolset_tokens[0] = rows
    return _toolset_tokens[1].get(endpoint, ())


class Admission(NamedTuple):
    """What check_endpoint decided: `failure` None admits the caller (with `token`, and for an
    OAuth access token the `caller` it names); else a metric label, the HTTP status (401, or 403
    for a token lacking a scope) and, for a refused access token, why (for WWW-Authenticate)."""

    failure: str | None
    token: str = ""
    caller: Caller | None = None
    status: int = 401
    refusal: oauth.OAuthRefusal | None = None


KEYS_NEEDED = "keys_needed"  # the issuer's keys must be fetched (in a thread) before deciding


def check_endpoint(
    endpoint: str,
    authorization: str | None,
    query: Mapping[str, str],
    runtime: Runtime,
    *,
    verifier: oauth.Verifier | None = None,
    host: str | None = None,
) -> Admission:
    """Whether the caller may use the endpoint. `authorization` is the Authorization header's
    value, if sent; `host` the request's Host (an endpoint's canonical URL may derive from it).

    A static token (accepted_tokens) admits as before; with OAuth on for the endpoint
    (mcp-oauth_issuer, mcp-oauth_endpoints) and a `verifier`, any other bearer token is validated
    as an access token (gateway.oauth). Failure `KEYS_NEEDED`: refresh `verifier.keys` and ask again."""
    variables = runtime.variables  # Runtime.var, minus a call per lookup: this runs on every request
    accepted = accepted_tokens(endpoint, runtime)
    cfg = oauth.config(runtime) if variables["mcp-oauth_issuer"] else None
    use_oauth = verifier is not None and cfg is not None and cfg.enabled_for(endpoint)
    if not accepted and not use_oauth:
        return Admission("no_token_configured")
    token, how = presented_token(authorization, query, allow_query=variables["mcp-allow_query_token"])
    if token is None:
        return Admission(how)
    if accepted and token_matches(token, accepted):
        return tuple.__new__(Admission, (None, token, None, 401, None))  # Admission(None, token), minus ~0.4 us
    if not use_oauth:
        return Admission("invalid_token")
    assert verifier is not None and cfg is not None
    try:
        return tuple.__new__(Admission, (None, token, verifier.admit(token, endpoint, host, runtime, cfg), 401, None))
    except oauth.KeysNeeded:
        return Admission(KEYS_NEEDED)
    except oauth.OAuthRefusal as refusal:
        return Admission(refusal.reason, status=refusal.status, refusal=refusal)


def check_metrics(authorization: str | None, runtime: Runtime) -> bool:
    accepted: tuple[str, ...] = runtime.var("mcp-metrics_auth")
    if not accepted:
        return True
    token, _ = presented_token(authorization, {}, allow_query=False)
    return token is not None and token_matches(token, accepted)
