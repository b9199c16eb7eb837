"""The audit trail: every administrative change, who made it, and how it ended.

`record()` is the one way in. Admin tools, `admin.sql` writes (through the endpoint or the
CLI on a stopped gateway) and the config endpoint's `set_config`/`reload_config` call it,
usually through `audited()`, a context manager that also records failures (outcome = the
error code). Rows live in config.db (`mcp_audit_log`, schema.sql section `admin_state`), so they
survive a restart; each insert prunes rows older than `admin-audit_retention_days` and beyond
`admin-audit_max_rows`.

Secrets never reach a row. Three layers, any one of which would do for the common case:
1. values under secret-looking keys (password, token, api_key, *_auth ...) are masked;
2. in SQL text that touches a secret column or variable, every string literal is masked;
3. the serialised row is scrubbed of every secret value the caller passes in (`secrets`:
   the configured tokens and resolved database passwords), wherever it appears.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway import sqlite
from gateway.call import CallContext
from gateway.errors import GatewayError
from gateway.store import ConfigStore
from gateway.variables import CORE_VARIABLES, MASK

# Read from the caller's runtime; these defaults serve callers without one (the CLI on a stopped gateway).
_DEFAULTS = {v.name: v.parse(None) for v in CORE_VARIABLES if v.name.startswith("admin-audit_")}
SECRET_KEY = re.compile(r"(password|passwd|secret|token|api_key|apikey|_auth$|credential)", re.IGNORECASE)
# Names whose presence in a statement means its string literals may hold a secret.
SECRET_MARKERS = re.compile(
    r"(db_password|_auth\b|api_key|password|token|secret|mcp_auth_profiles|embedding_json)", re.IGNORECASE
)
SQL_STRING = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\b[xX]'[0-9A-Fa-f]*'")
MAX_TEXT_CHARS = 16_384  # one audit value (arguments, before, after) is cut beyond this


@dataclass(frozen=True)
class Actor:
    """Who asked: the endpoint called, the caller's token fingerprint and address."""

    endpoint: str
    token_fingerprint: str = ""
    client: str = ""
    subject: str = ""  # who an OAuth access token named


CLI_ACTOR = Actor(endpoint="cli", client="local")


def actor_of(ctx: CallContext) -> Actor:
    return Actor(endpoint=ctx.endpoint, token_fingerprint=ctx.token_fingerprint, client=ctx.client, subject=ctx.caller.subject)


def mask_sql(statement: str) -> str:
    """The statement with every string literal masked when it touches a secret."""
    if not SECRET_MARKERS.search(statement):
        return statement
    return SQL_STRING.sub(f"'{MASK}'", statement)


def mask_value(value: Any, *, key: str = "") -> Any:
    """A JSON-able copy with values under secret-looking keys masked (recursively)."""
    if key and SECRET_KEY.search(key) and value not in (None, "", [], {}):
        return MASK
    if isinstance(value, Mapping):
        return {str(k): mask_value(v, key=str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_value(v, key=key) for v in value]
    if isinstance(value, str) and value.lstrip().startswith("{") and SECRET_MARKERS.search(value):
        try:  # a JSON column (embedding_json) may nest a secret
            return orjson.dumps(mask_value(orjson.loads(value))).decode()
        except orjson.JSONDecodeError:
            return value
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    return value


def _scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` with each secret replaced, as written and as JSON escapes it (quotes, backslashes)."""
    for secret in secrets:
        if len(secret) < 4:
            continue  # too short to tell from ordinary text; layers 1 and 2 cover it
        for form in {secret, orjson.dumps(secret).decode()[1:-1]}:
            text = text.replace(form, MASK)
    return text


def _text(value: Any, secrets: Iterable[str]) -> str | None:
    if value is None:
        return None
    text = _scrub(orjson.dumps(mask_value(value), default=str).decode(), secrets)
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + "...(cut)"


def record(
    store: ConfigStore,
    actor: Actor,
    action: str,
    *,
    arguments: Mapping[str, Any] | None = None,
    before: Any = None,
    after: Any = None,
    outcome: str = "ok",
    message: str = "",
    secrets: Iterable[str] = (),
    runtime_variables: Mapping[str, Any] | None = None,
) -> None:
    """Write one audit row (secrets masked) and prune what retention no longer keeps."""
    secrets = sorted({s for s in secrets if s}, key=len, reverse=True)  # longest first: no partial leftovers
    settings = {**_DEFAULTS, **{k: v for k, v in (runtime_variables or {}).items() if k in _DEFAULTS}}
    now = time.time()
    conn = store.conn()
    with sqlite.transaction(conn):
        conn.execute(
            "INSERT INTO mcp_audit_log (at, endpoint, token_fingerprint, client, action, arguments, before, after, outcome, message,"
            " subject) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                now,
                actor.endpoint,
                actor.token_fingerprint,
                actor.client,
                action,
                _text(dict(arguments or {}), secrets) or "{}",
                _text(before, secrets),
                _text(after, secrets),
                outcome,
                _scrub(message, secrets)[:MAX_TEXT_CHARS],
                actor.subject,
            ),
        )
        conn.execute("DELETE FROM mcp_audit_log WHERE at < ?", (now - settings["admin-audit_retention_days"] * 86400,))
        conn.execute(
            "DELETE FROM mcp_audit_log WHERE id <= (SELECT MAX(id) FROM mcp_audit_log) - ?", (settings["admin-audit_max_rows"],)
        )


@dataclass
class Entry:
    """What an audited block fills in as it learns it."""

    arguments: dict[str, Any]
    before: Any = None
    after: Any = None
    message: str = ""
    extra_secrets: list[str] = field(default_factory=list)  # e.g. a generated password, scrubbed too


@contextlib.contextmanager
def audited(
    store: ConfigStore,
    actor: Actor,
    action: str,
    arguments: Mapping[str, Any],
    *,
    secrets: Iterable[str] = (),
    runtime_variables: Mapping[str, Any] | None = None,
) -> Iterator[Entry]:
    """Record the block's change when it ends: outcome ok, or the error's code and message
    (the error still propagates). A failure to write the audit row fails the call."""
    entry = Entry(arguments=dict(arguments))
    outcome, message = "ok", ""
    try:
        yield entry
    except GatewayError as exc:
        outcome, message = exc.code, exc.message
        raise
    except Exception:
        outcome, message = "INTERNAL", "failed unexpectedly; see the gateway log"
        raise
    finally:
        record(
            store,
            actor,
            action,
            arguments=entry.arguments,
            before=entry.before,
            after=entry.after,
            outcome=outcome,
            message=entry.message or message,
            secrets=[*secrets, *entry.extra_secrets],
            runtime_variables=runtime_variables,
        )


def read(store: ConfigStore, *, since: float = 0.0, limit: int = 100, action: str = "") -> tuple[list[dict[str, Any]], bool]:
    """Rows at or after `since` (unix seconds), newest first; (rows, truncated)."""
    where, params = "WHERE at >= ?", [since]
    if action:
        where += " AND action = ?"
        params.append(action)
    rows = sqlite.rows(store.conn(), f"SELECT * FROM mcp_audit_log {where} ORDER BY id DESC LIMIT ?", [*params, limit + 1])
    for row in rows:
        for column in ("arguments", "before", "after"):
            if row[column] is not None:
                row[column] = orjson.loads(row[column]) if not row[column].endswith("...(cut)") else row[column]
    return rows[:limit], len(rows) > limit


def audited_call(store: ConfigStore, ctx: CallContext, arguments: Mapping[str, Any], *, secrets: Iterable[str] = ()) -> Any:
    """`audited` for the tool call `ctx` serves: its caller, its tool name, its runtime's secrets."""
    return audited(store, actor_of(ctx), ctx.tool_name, arguments, secrets=secrets, runtime_variables=ctx.runtime.variables)
