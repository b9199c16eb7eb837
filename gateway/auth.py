"""Bearer-token checks: one token variable per endpoint, several tokens for rotation.

No token configured means no entry (ProxySQL's empty-token bypass was CVE-2026-48774). Every
configured token is compared in constant time, all of them, so timing tells nothing about
which one nearly matched. `?token=` is honoured only when `mcp-allow_query_token` is on.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

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


def check_endpoint(
    endpoint: str, authorization: str | None, query: Mapping[str, str], runtime: Runtime
) -> tuple[str | None, str]:
    """(None, the token presented) when the caller may use the endpoint, else (the failure
    reason, a metric label, ""). `authorization` is the Authorization header's value, if sent."""
    variables = runtime.variables  # Runtime.var, minus a call per lookup: this runs on every request
    accepted = accepted_tokens(endpoint, runtime)
    if not accepted:
        return "no_token_configured", ""
    token, how = presented_token(authorization, query, allow_query=variables["mcp-allow_query_token"])
    if token is None:
        return how, ""
    return (None, token) if token_matches(token, accepted) else ("invalid_token", "")


def check_metrics(authorization: str | None, runtime: Runtime) -> bool:
    accepted: tuple[str, ...] = runtime.var("mcp-metrics_auth")
    if not accepted:
        return True
    token, _ = presented_token(authorization, {}, allow_query=False)
    return token is not None and token_matches(token, accepted)
