"""The issuer's keys: fetched only over https (http on loopback only), failures kept and reported."""

from __future__ import annotations

import pytest

from gateway import oauth


def _cfg(issuer: str, jwks_url: str = "") -> oauth.OAuthConfig:
    return oauth.OAuthConfig(
        issuer=issuer, jwks_url=jwks_url, endpoints=frozenset({"*"}), algorithms=("RS256",), leeway_s=30,
        resource_url="https://gw.example", endpoint_scopes={}, tool_scopes={}, subject_claim="sub", carried_claims=(),
        jwks_cache_s=600, http_timeout_s=1.0, max_token_bytes=8192, use_ssl=True,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("issuer", "jwks_url"), [("http://login.example.com", ""), ("https://login.example.com", "http://keys.example.com/jwks")]
)
def test_keys_in_clear_text_off_loopback_are_refused(issuer: str, jwks_url: str) -> None:
    keys = oauth.KeyStore()
    cfg = _cfg(issuer, jwks_url)
    keys.refresh(cfg)  # no request is made: refused before any connection
    assert "https" in keys.state()["error"]
    with pytest.raises(oauth.OAuthRefusal) as refused:
        keys.key_for("k1", cfg)
    assert refused.value.status == 401 and refused.value.reason == "jwks_unavailable"


def test_scopes_and_metadata_per_endpoint_name() -> None:
    cfg = oauth.OAuthConfig(
        issuer="https://login.example.com", jwks_url="", endpoints=frozenset({"rag", "sales_toolset"}), algorithms=("RS256",),
        leeway_s=30, resource_url="https://gw.example:6071", endpoint_scopes={"rag": ("mcp:read", "mcp:rag")},
        tool_scopes={"sales_toolset/top_customers": ("mcp:sales",)}, subject_claim="sub", carried_claims=(),
        jwks_cache_s=600, http_timeout_s=1.0, max_token_bytes=8192, use_ssl=True,
    )  # fmt: skip
    assert cfg.scopes_for("sales_toolset") == ("mcp:sales_toolset",)  # any endpoint name, e.g. an admin-defined toolset
    assert cfg.scopes_for("rag") == ("mcp:read", "mcp:rag")
    assert not cfg.enabled_for("admin")
    meta = oauth.protected_resource_metadata("sales_toolset", ["rag", "sales_toolset", "admin"], cfg, None)
    assert meta is not None and meta["resource"] == "https://gw.example:6071/mcp/sales_toolset"
    assert meta["scopes_supported"] == ["mcp:sales", "mcp:sales_toolset"]
    assert oauth.protected_resource_metadata("admin", ["admin"], cfg, None) is None
    assert "resource_metadata" not in oauth.challenge("admin", cfg, None)
