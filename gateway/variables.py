"""Every runtime variable, declared once: name, type, default, help.

A declaration drives validation (`parse`), defaults, masking of secrets, the README's
configuration reference (`mcp-gateway variables --markdown`) and a test that each is
documented. Values are stored as text in `global_variables` (as ProxySQL does) and parsed
into typed values when a runtime is built.

Handlers add their own variables through `ToolHandler.variables`, backends/ through
backends.declarations; `all_variables()` joins the core list, one bearer-token variable per
endpoint (the endpoints come from the app's handler list, gateway.assembly) and theirs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gateway.errors import ConfigError

MASK = "********"


@dataclass(frozen=True)
class Variable:
    name: str
    kind: str  # "int" | "bool" | "str" | "enum" | "tokens" | "list" | "url"
    default: str
    help: str
    secret: bool = False  # a "url" is masked only where it carries credentials
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()  # enum values; for a "url", the schemes allowed
    restart_required: bool = False  # takes effect at the next start, not on LOAD
    local: bool = False  # describes this machine: never shared with a cluster (gateway/cluster.py)

    def parse(self, text: str | None) -> Any:
        """Turn stored text into a typed value, or raise ConfigError naming the variable."""
        raw = self.default if text is None else str(text).strip()
        if self.kind == "int":
            try:
                value = int(raw)
            except ValueError:
                raise ConfigError(f"{self.name}: expected an integer, got {raw!r}") from None
            if self.minimum is not None and value < self.minimum:
                raise ConfigError(f"{self.name}: {value} is below the minimum {self.minimum}")
            if self.maximum is not None and value > self.maximum:
                raise ConfigError(f"{self.name}: {value} is above the maximum {self.maximum}")
            return value
        if self.kind == "bool":
            lowered = raw.lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ConfigError(f"{self.name}: expected true or false, got {raw!r}")
        if self.kind == "enum":
            if raw not in self.choices:
                raise ConfigError(f"{self.name}: expected one of {', '.join(self.choices)}, got {raw!r}")
            return raw
        if self.kind in ("tokens", "list"):
            # Comma separated; for tokens several values let a token rotate without downtime.
            items = tuple(part.strip() for part in raw.split(",") if part.strip())
            if self.kind == "list" and self.choices:
                unknown = [item for item in items if item not in self.choices]
                if unknown:
                    raise ConfigError(f"{self.name}: {', '.join(unknown)} not allowed; choose among {', '.join(self.choices)}")
            if self.kind == "tokens":
                for token in items:
                    if len(token) < 16 or any(ch.isspace() for ch in token):
                        raise ConfigError(f"{self.name}: each token needs 16+ characters and no spaces")
            return items
        if self.kind == "url" and raw:
            scheme, sep, _ = raw.partition("://")
            if not sep or (self.choices and scheme.lower() not in self.choices):
                raise ConfigError(f"{self.name}: expected a URL starting with {' or '.join(f'{c}://' for c in self.choices)}")
        return raw

    def display(self, text: str | None) -> str:
        """What an admin or a response may see of a stored value: secrets are masked (a URL's
        credentials only, so its host stays readable)."""
        value = self.default if text is None else text
        if self.secret and value:
            return mask_url(value) if self.kind == "url" else MASK
        return value


_URL_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?:(?P<user>[^:@/]*):)?(?P<secret>[^@/]*)@")
_URL_PASSWORD_PARAM = re.compile(r"(?i)([?&]password=)[^&#]*")


def mask_url(url: str) -> str:
    """`redis://user:pw@host:6379/0` -> `redis://user:********@host:6379/0`; a lone userinfo
    (`redis://pw@host`) and a `password=` parameter are masked too."""
    masked = _URL_USERINFO.sub(
        lambda m: f"{m['scheme']}{m['user'] + ':' if m['user'] is not None else ''}{MASK if m['secret'] else ''}@", url, count=1
    )
    return _URL_PASSWORD_PARAM.sub(lambda m: m.group(1) + MASK, masked)


def carries_credentials(url: str) -> bool:
    return mask_url(url) != url


def _v(name: str, kind: str, default: Any, help: str, **kw: Any) -> Variable:
    return Variable(
        name=name, kind=kind, default=str(default).lower() if isinstance(default, bool) else str(default), help=help, **kw
    )


CORE_VARIABLES: tuple[Variable, ...] = (
    _v("mcp-enabled", "bool", True, "Serve MCP at all; false answers every endpoint with UNAVAILABLE."),
    _v("mcp-port", "int", 6071, "TCP port of the HTTPS listener.", minimum=1, maximum=65535, restart_required=True, local=True),
    _v(
        "mcp-bind_address",
        "str",
        "127.0.0.1",
        "Address the listener binds to (0.0.0.0 for all).",
        restart_required=True,
        local=True,
    ),
    _v(
        "mcp-use_ssl",
        "bool",
        True,
        "Serve HTTPS. false serves plain HTTP and warns loudly at start.",
        restart_required=True,
        local=True,
    ),
    _v(
        "mcp-ssl_cert",
        "str",
        "",
        "PEM certificate chain file; empty uses a self-signed one generated in the data directory.",
        local=True,
    ),
    _v("mcp-ssl_key", "str", "", "PEM private key file for mcp-ssl_cert.", local=True),
    _v("mcp-timeout_ms", "int", 30000, "Deadline of one tool call, in milliseconds.", minimum=10, maximum=3_600_000),
    _v(
        "mcp-max_request_bytes",
        "int",
        1_048_576,
        "Largest request body accepted; larger bodies get HTTP 413 before parsing.",
        minimum=1024,
        maximum=64 * 1_048_576,
    ),
    _v(
        "mcp-allowed_origins",
        "list",
        "",
        "Comma-separated Origins (scheme://host[:port]) allowed besides loopback ones; a request with another Origin gets 403. * allows any.",
    ),
    _v(
        "mcp-allowed_hosts",
        "list",
        "",
        "Comma-separated Host names (any port) allowed besides localhost, 127.0.0.1 and [::1]; another Host gets 421. "
        "Empty: enforced only when bound to loopback (any Host is accepted on other binds). * allows any.",
    ),
    _v(
        "mcp-allow_query_token",
        "bool",
        False,
        "Also accept the token as ?token= (ProxySQL's fallback). Off: tokens in URLs end up in logs.",
    ),
    _v(
        "mcp-tool_name_style",
        "enum",
        "dotted",
        "Tool names tools/list advertises: dotted (rag.search_fts) or portable (rag_search_fts). tools/call accepts both.",
        choices=("dotted", "portable"),
    ),
    _v(
        "mcp-text_format",
        "enum",
        "compact",
        "The text block of tool results: compact (a header line and one line per row, field lines; structuredContent "
        "keeps the typed JSON) or json (the JSON of structuredContent). A tool's format argument overrides it.",
        choices=("compact", "json"),
    ),
    _v("mcp-tools_page_size", "int", 100, "Tools per tools/list page (cursor paging).", minimum=1, maximum=1000),
    _v(
        "mcp-metrics_auth",
        "tokens",
        "",
        "Bearer token(s) required on GET /metrics; empty serves metrics without a token.",
        secret=True,
    ),
    _v(
        "mcp-metrics_port",
        "int",
        0,
        "Also serve /metrics over plain HTTP on this port (0: off).",
        minimum=0,
        maximum=65535,
        restart_required=True,
        local=True,
    ),
    _v(
        "mcp-cluster_dsn",
        "str",
        "",
        "PostgreSQL DSN of the cluster's shared configuration (disk layer, LOADs announced to every instance); empty: this instance alone.",
        secret=True,
        restart_required=True,
        local=True,
    ),
    _v(
        "mcp-cluster_member_name",
        "str",
        "",
        "This instance's name in the cluster (get_status); empty: host:port.",
        restart_required=True,
        local=True,
    ),
    _v(
        "admin-audit_retention_days",
        "int",
        90,
        "Audit trail rows (mcp_audit_log) older than this many days are deleted.",
        minimum=1,
        maximum=3650,
    ),
    _v(
        "admin-audit_max_rows",
        "int",
        100_000,
        "Most audit trail rows kept; the oldest go first.",
        minimum=100,
        maximum=10_000_000,
    ),
    _v("mcp-stats_show_queries_max_rows", "int", 200, "Most rows show_queries returns.", minimum=1, maximum=10000),
    _v(
        "mcp-evidence_retention_s",
        "int",
        86_400,
        "Seconds of traffic evidence (calls, digest timings, refusals, auth failures) kept for /mcp/ai's anomaly detection and recommendations.",
        minimum=600,
        maximum=30 * 86_400,
    ),
)


_ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
OAUTH_VARIABLES: tuple[Variable, ...] = (
    _v(
        "mcp-oauth_issuer",
        "url",
        "",
        "OAuth 2.1 / OIDC issuer whose access tokens (JWTs) the endpoints accept beside their static tokens; "
        "its keys come from OIDC discovery unless mcp-oauth_jwks_url is set. Empty: OAuth off (no metadata served).",
        choices=("https", "http"),
    ),
    _v(
        "mcp-oauth_jwks_url",
        "url",
        "",
        "The issuer's JWKS URL; empty: discovered from mcp-oauth_issuer.",
        choices=("https", "http"),
    ),
    _v(
        "mcp-oauth_endpoints",
        "list",
        "*",
        "Endpoints accepting OAuth access tokens when mcp-oauth_issuer is set (comma separated; * every endpoint).",
    ),
    _v(
        "mcp-oauth_resource_url",
        "url",
        "",
        "Public base URL of this gateway (https://host:port): an endpoint's canonical URL, which a token's audience must "
        "name, is <this>/mcp/<endpoint>. Empty: https://<Host> for a loopback Host or one in mcp-allowed_hosts "
        "(other Hosts get no OAuth).",
        choices=("https", "http"),
    ),
    _v(
        "mcp-oauth_algorithms",
        "list",
        "RS256,PS256,ES256,EdDSA",
        "Signing algorithms accepted on access tokens (asymmetric only: never none, never HMAC).",
        choices=_ASYMMETRIC,
    ),
    _v("mcp-oauth_leeway_s", "int", 30, "Clock leeway for exp/nbf, in seconds.", minimum=0, maximum=300),
    _v(
        "mcp-oauth_endpoint_scopes",
        "list",
        "",
        "Scopes an endpoint needs, as endpoint=scope scope items (comma separated), e.g. rag=mcp:rag mcp:read. "
        "An endpoint not listed needs mcp:<endpoint>; endpoint= (no scope) needs none.",
    ),
    _v(
        "mcp-oauth_tool_scopes",
        "list",
        "",
        "Further scopes a tool needs, as endpoint/tool=scope items, e.g. query/run_sql_readonly=mcp:sql. "
        "A token lacking one gets 403 insufficient_scope.",
    ),
    _v("mcp-oauth_subject_claim", "str", "sub", "The claim naming the caller (audit, digests, query rules, logs)."),
    _v(
        "mcp-oauth_claims",
        "list",
        "",
        "Further claims carried with the caller's identity (e.g. email,groups,tenant): query rules and database "
        "identity mappings may use them.",
    ),
    _v("mcp-oauth_jwks_cache_s", "int", 600, "Seconds the issuer's keys are cached per worker.", minimum=10, maximum=86400),
    _v(
        "mcp-oauth_http_timeout_ms",
        "int",
        3000,
        "Timeout of one request to the issuer (discovery, JWKS): a down issuer fails closed within it.",
        minimum=100,
        maximum=30000,
    ),
    _v(
        "mcp-oauth_db_settings",
        "list",
        "",
        "The caller's identity as PostgreSQL settings, as setting=claim items (e.g. app.user_id=sub, app.tenant=tenant): "
        "set with set_config(..., true) inside each statement's read-only transaction (values bound) for row-level "
        "security policies to read with current_setting(); '' for static-token callers. Results are cached per identity.",
    ),
    _v("mcp-oauth_max_token_bytes", "int", 8192, "Largest access token accepted.", minimum=512, maximum=65536),
)


def endpoint_auth_variable(endpoint: str) -> Variable:
    """The bearer-token variable of /mcp/<endpoint>."""
    return _v(
        f"mcp-{endpoint}_endpoint_auth",
        "tokens",
        "",
        f"Bearer token(s) for /mcp/{endpoint}, comma separated. Empty refuses every call.",
        secret=True,
    )


def tools_disabled_variable(endpoint: str) -> Variable:
    """The tools /mcp/<endpoint> does not serve (gateway/surface.py)."""
    return _v(
        f"mcp-{endpoint}_tools_disabled",
        "list",
        "",
        f"Tools /mcp/{endpoint} does not serve: names or globs (run_sql_*), comma separated. Not listed; a call is refused.",
    )


def all_variables(extra: Iterable[Variable] = (), *, endpoints: Iterable[str] = ()) -> dict[str, Variable]:
    """The core variables, the token variable of each endpoint, and those handlers and backends
    declare; a duplicate name is a programming error."""
    table: dict[str, Variable] = {}
    for variable in (*CORE_VARIABLES, *OAUTH_VARIABLES, *(endpoint_auth_variable(e) for e in endpoints), *extra):
        if variable.name in table:
            raise RuntimeError(f"variable {variable.name} declared twice")
        if not variable.help:
            raise RuntimeError(f"variable {variable.name} has no help text")
        variable.parse(None)  # the default itself must validate
        table[variable.name] = variable
    return table
