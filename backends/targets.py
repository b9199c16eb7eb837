"""Target and auth profiles of /mcp/query: the `MCP PROFILES` config module and `Target`.

A target is a logical name (`target_id`) a client routes to; where it lives and which
credentials it uses stay inside the gateway. `build_profiles` validates the memory rows of
`mcp_auth_profiles` and `mcp_target_profiles` for LOAD MCP PROFILES TO RUNTIME (backends/profiles.py
joins these checks with the privilege check into the config module):

- a malformed value (a port that is not a number, a bad ssl_mode, a broken password
  reference) refuses the whole LOAD with ConfigError, so nothing changes;
- a target that is well formed but cannot serve (inactive, unknown auth profile, unknown
  protocol, missing sqlite file, unset password variable) still loads, with effective=0 and
  a `skip_reason`, so it never vanishes silently (ProxySQL issue 6168).

`db_password` is a literal or a reference: `env:NAME` or `file:/path`. The runtime table
keeps what was stored; the secret itself is resolved only into `Target.password`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends.engines import ENGINES, PROTOCOLS, engine_for
from backends.engines.base import Engine
from gateway.errors import InvalidArgument
from gateway.runtime import Runtime
from gateway.variables import Variable

MAX_CACHE_TTL_MS = 30 * 24 * 3600 * 1000  # 30 days
# libpq's vocabulary, also mapped onto pymysql's ssl options.
SSL_MODES = ("", "disable", "allow", "prefer", "require", "verify-ca", "verify-full")
TARGET_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

QUERY_VARIABLES: tuple[Variable, ...] = (
    Variable(
        "mcp-query_default_target",
        "str",
        "",
        "target_id used when a /mcp/query call names none; empty: the first effective target by target_id.",
    ),
    Variable("mcp-query_pool_max", "int", "8", "Most open connections per target.", minimum=1, maximum=256),
    Variable(
        "mcp-query_pool_timeout_ms",
        "int",
        "2000",
        "How long a call waits for a pooled connection (including connecting) before UNAVAILABLE.",
        minimum=100,
        maximum=600_000,
    ),
    Variable(
        "mcp-query_pool_idle_check_ms",
        "int",
        "5000",
        "A pooled connection idle longer than this is pinged before it is handed out (catches backend restarts).",
        minimum=0,
        maximum=3_600_000,
    ),
)


@dataclass(frozen=True)
class Target:
    """One effective target, with its secret resolved. Never serialise it whole."""

    target_id: str
    protocol: str  # a name of backends.engines.ENGINES: mysql | pgsql | sqlite
    host: str
    port: int
    database: str  # database name; the file path for sqlite
    username: str
    password: str = field(repr=False)
    default_schema: str
    description: str
    max_rows: int
    timeout_ms: int
    allow_explain: bool
    allow_discovery: bool
    use_ssl: bool
    ssl_mode: str
    allow_explain_analyze: bool = False  # explain_sql analyze=true: runs the statement (read-only, timed)
    cache_ttl_ms: int = 0  # results served from the result cache this long; 0: not cached (rules may say otherwise)
    # Chosen once from the protocol (as httpx chooses a transport); everything engine-specific goes through it.
    engine: Engine = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine", engine_for(self.protocol))

    @property
    def capabilities(self) -> list[str]:
        caps = ["readonly_sql"]
        if self.allow_discovery:
            caps.insert(0, "inventory")
        if self.allow_explain:
            caps.append("explain")
            if self.allow_explain_analyze:
                caps.append("explain_analyze")
        return caps


class SecretError(Exception):
    """A password reference that cannot be resolved; the message names no secret."""


def resolve_secret(stored: str) -> str:
    """`env:NAME` -> the variable's value, `file:/path` -> the file's first line, else literal."""
    if stored.startswith("env:"):
        name = stored[4:]
        value = os.environ.get(name)
        if value is None:
            raise SecretError(f"db_password env:{name} is not set")
        return value
    if stored.startswith("file:"):
        path = stored[5:]
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError:
            raise SecretError(f"db_password file {path} is not readable") from None
        lines = text.splitlines()
        return lines[0] if lines else ""
    return stored


def _check_reference(stored: str) -> str | None:
    """A syntax error in a password reference, or None."""
    if stored.startswith("env:") and not ENV_NAME_RE.match(stored[4:]):
        return "db_password env: reference needs a variable name like env:DB_PASSWORD"
    if stored.startswith("file:") and not os.path.isabs(stored[5:]):
        return "db_password file: reference needs an absolute path"
    return None


def _int(row: Mapping[str, Any], column: str, low: int, high: int, where: str, errors: list[str]) -> int:
    value = row.get(column)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        errors.append(f"{where}: {column} must be an integer from {low} to {high}, got {value!r}")
        return low
    return value


FLAG_WORDS = {"0": 0, "1": 1, "false": 0, "true": 1, "no": 0, "yes": 1, "off": 0, "on": 1}


def _flag(row: dict[str, Any], column: str, where: str, errors: list[str]) -> None:
    """0/1, or a word a bootstrap TOML boolean becomes ('true'); normalised in place to 0/1."""
    value = row.get(column)
    if isinstance(value, bool):
        row[column] = int(value)
    elif isinstance(value, int) and value in (0, 1):
        return
    elif isinstance(value, str) and value.strip().lower() in FLAG_WORDS:
        row[column] = FLAG_WORDS[value.strip().lower()]
    else:
        errors.append(f"{where}: {column} must be 0 or 1 (or true/false), got {value!r}")


def _text(row: Mapping[str, Any], column: str) -> str:
    value = row.get(column)
    return "" if value is None else str(value)


def _validate_auth(row: dict[str, Any], errors: list[str]) -> None:
    where = f"mcp_auth_profiles {row.get('auth_profile_id')!r}"
    if not _text(row, "auth_profile_id").strip():
        errors.append("mcp_auth_profiles: auth_profile_id must not be empty")
    _flag(row, "use_ssl", where, errors)
    if _text(row, "ssl_mode") not in SSL_MODES:
        errors.append(f"{where}: ssl_mode must be one of {', '.join(m for m in SSL_MODES if m)} or empty")
    problem = _check_reference(_text(row, "db_password"))
    if problem:
        errors.append(f"{where}: {problem}")


def _validate_target(row: dict[str, Any], errors: list[str]) -> None:
    target_id = _text(row, "target_id")
    where = f"mcp_target_profiles {target_id!r}"
    if not TARGET_ID_RE.match(target_id):
        errors.append(f"{where}: target_id must be 1-64 letters, digits or _ . : - (starting with a letter or digit)")
    _int(row, "port", 0, 65535, where, errors)
    _int(row, "max_rows", 1, 1_000_000, where, errors)
    _int(row, "timeout_ms", 1, 3_600_000, where, errors)
    if "cache_ttl_ms" in row:  # absent from a data directory created before the column
        _int(row, "cache_ttl_ms", 0, MAX_CACHE_TTL_MS, where, errors)
    for flag in ("allow_explain", "allow_discovery", "active"):
        _flag(row, flag, where, errors)
    if "allow_explain_analyze" in row:  # absent from a data directory created before the column
        _flag(row, "allow_explain_analyze", where, errors)


def skip_reason(target: Mapping[str, Any], auth_profiles: Mapping[str, Mapping[str, Any]]) -> str:
    """Why a well-formed target cannot serve, or '' when it can."""
    if not target.get("active"):
        return "inactive"
    protocol = _text(target, "protocol")
    engine = ENGINES.get(protocol)
    if engine is None:
        return f"bad protocol {protocol!r} (expected {', '.join(PROTOCOLS[:-1])} or {PROTOCOLS[-1]})"
    auth_id = _text(target, "auth_profile_id")
    auth = auth_profiles.get(auth_id)
    if auth is None and (auth_id or engine.needs_auth_profile):
        return "auth_profile_id not found" if not auth_id else f"auth_profile_id {auth_id!r} not found"
    problem = engine.config_problem(target)
    if problem:
        return problem
    if auth is not None:
        try:
            resolve_secret(_text(auth, "db_password"))
        except SecretError as exc:
            return str(exc)
    return ""


def targets_from_runtime(runtime: Runtime) -> tuple[dict[str, Target], dict[str, str]]:
    """Effective targets (secrets resolved now) and, for every other target, why it is not."""
    auth_by_id = {row["auth_profile_id"]: row for row in runtime.table("runtime_mcp_auth_profiles")}
    targets: dict[str, Target] = {}
    skipped: dict[str, str] = {}
    for row in runtime.table("runtime_mcp_target_profiles"):
        target_id = row["target_id"]
        reason = row.get("skip_reason") or ("" if row.get("effective") else "not effective")
        if reason:
            skipped[target_id] = reason
            continue
        auth = auth_by_id.get(row.get("auth_profile_id") or "", {})
        try:
            password = resolve_secret(_text(auth, "db_password"))
        except SecretError as exc:  # the environment changed since the LOAD
            skipped[target_id] = str(exc)
            continue
        targets[target_id] = _target(row, auth, password)
    return targets, skipped


def identity_variants(
    runtime: Runtime, targets: Mapping[str, Target]
) -> tuple[list[tuple[str, str, str]], dict[tuple[str, str], Target]]:
    """mcp_identity_profiles at runtime: the active rules (target_id, caller, auth_profile_id) in
    rule_id order, and each (target_id, auth_profile_id) they name as a Target with that account."""
    auth_by_id = {row["auth_profile_id"]: row for row in runtime.table("runtime_mcp_auth_profiles")}
    rows = {row["target_id"]: row for row in runtime.table("runtime_mcp_target_profiles")}
    rules: list[tuple[str, str, str]] = []
    variants: dict[tuple[str, str], Target] = {}
    for row in sorted(runtime.table("runtime_mcp_identity_profiles"), key=lambda r: r["rule_id"]):
        target_id, auth_id = row["target_id"], row["auth_profile_id"]
        if not row.get("active") or target_id not in targets or auth_id not in auth_by_id:
            continue
        rules.append((target_id, str(row["caller"]).strip(), auth_id))
        if (target_id, auth_id) not in variants:
            auth = auth_by_id[auth_id]
            try:
                variants[(target_id, auth_id)] = _target(rows[target_id], auth, resolve_secret(_text(auth, "db_password")))
            except SecretError:
                rules.pop()  # fail closed below: a rule whose account cannot be built refuses its callers
                rules.append((target_id, str(row["caller"]).strip(), ""))
    return rules, variants


def _target(row: Mapping[str, Any], auth: Mapping[str, Any], password: str) -> Target:
    protocol = row["protocol"]
    return Target(
        target_id=row["target_id"],
        protocol=protocol,
        host=_text(row, "host"),
        port=int(row.get("port") or engine_for(protocol).default_port),
        database=_text(row, "database"),
        username=_text(auth, "db_username"),
        password=password,
        default_schema=_text(auth, "default_schema"),
        description=_text(row, "description"),
        max_rows=int(row["max_rows"]),
        timeout_ms=int(row["timeout_ms"]),
        allow_explain=bool(row["allow_explain"]),
        allow_discovery=bool(row["allow_discovery"]),
        use_ssl=bool(auth.get("use_ssl", 0)),
        ssl_mode=_text(auth, "ssl_mode"),
        allow_explain_analyze=bool(row.get("allow_explain_analyze", 0)),
        cache_ttl_ms=int(row.get("cache_ttl_ms") or 0),
    )


def default_schema(target: Target, schema: str | None) -> str:
    """The schema a call runs in: the one given, else the target's default for its engine."""
    if schema:
        return schema
    found = target.engine.default_schema(target)
    if found:
        return found
    raise InvalidArgument(f"schema is required: target {target.target_id} has no default database")
