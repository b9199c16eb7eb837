"""What a cached result is keyed by, and what it says about itself.

The key is a hash of everything that can change a result: the target, a fingerprint of its
profile (so a LOAD that changes where or as whom the target connects makes the old entries
unreachable at once, in every worker and instance, even before they are dropped), the schema,
the statement as the read-only check regenerated it (canonical text with its literals: `where
id=1` and `WHERE id = 1` share an entry, `id = 2` does not), and the caps that shape the rows.
Never the caller's token: the cache is per target, as the target's database account is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from sqlglot import exp, parse_one
from sqlglot.errors import SqlglotError

# Profile columns that cannot change a result: editing them keeps the entries.
_NOT_RESULT_CHANGING = frozenset({"cache_ttl_ms", "comment", "description", "privilege_warnings"})


def profile_fingerprint(target_row: Mapping[str, Any], auth_row: Mapping[str, Any] | None) -> str:
    """A short hash of the target's runtime profile and its auth profile."""
    material = {
        "target": {k: v for k, v in sorted(target_row.items()) if k not in _NOT_RESULT_CHANGING},
        "auth": {k: v for k, v in sorted((auth_row or {}).items()) if k != "comment"},
    }
    return hashlib.blake2b(orjson.dumps(material, option=orjson.OPT_SORT_KEYS), digest_size=8).hexdigest()


def fingerprints(runtime_targets: Iterable[Mapping[str, Any]], runtime_auth: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """target_id -> fingerprint, for every target of a runtime snapshot."""
    auth_by_id = {row["auth_profile_id"]: row for row in runtime_auth}
    return {
        row["target_id"]: profile_fingerprint(row, auth_by_id.get(row.get("auth_profile_id") or ""))
        for row in runtime_targets
    }  # fmt: skip


def cache_key(*, target_id: str, fingerprint: str, schema: str, sql: str, max_rows: int, max_bytes: int) -> str:
    material = orjson.dumps([target_id, fingerprint, schema, sql, max_rows, max_bytes])
    return hashlib.blake2b(material, digest_size=16).hexdigest()


def tables_of(sql: str, dialect: str) -> tuple[str, ...]:
    """The tables a checked statement reads, lower case, each as `t` and (when qualified)
    `s.t`, without the names of its own CTEs. Empty when the text does not parse (SHOW ...):
    such an entry is dropped by target, pattern or clear, not by table."""
    try:
        tree = parse_one(sql, read=dialect)
    except (SqlglotError, ValueError):
        return ()
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    names: set[str] = set()
    for table in tree.find_all(exp.Table):
        name = table.name.lower()
        if not name or (name in ctes and not table.db):
            continue
        names.add(name)
        if table.db:
            names.add(f"{table.db.lower()}.{name}")
    return tuple(sorted(names))
