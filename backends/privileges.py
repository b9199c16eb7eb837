"""Layer 4 of read-only SQL: least privilege. `privilege_warnings(target, conn)` says, in plain
words, when a target's account could write or reach server files. `check_target` runs it on a
short-lived connection when MCP PROFILES are loaded, so an admin sees the result in
runtime_mcp_target_profiles.privilege_warnings (and mcp-query_refuse_privileged_targets makes
/mcp/query refuse such a target).

The other layers already keep the gateway's own statements read-only; this catches the
account that would make one mistake fatal (a superuser, FILE, pg_read_server_files, ...).
The check itself only reads catalogs and is rolled back. Failing to check is a warning too.
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import Any

import psycopg

from backends import connect
from backends.targets import Target

log = logging.getLogger("mcp_gateway.query")

_PG_CHECK = """
SELECT r.rolsuper, r.rolcreaterole, r.rolcreatedb, r.rolbypassrls,
       pg_has_role(current_user, 'pg_read_server_files', 'MEMBER') AS read_files,
       pg_has_role(current_user, 'pg_write_server_files', 'MEMBER') AS write_files,
       pg_has_role(current_user, 'pg_execute_server_program', 'MEMBER') AS run_programs,
       EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
                 AND n.nspname NOT LIKE 'pg_toast%'
                 AND has_table_privilege(c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE')) AS can_write_tables,
       EXISTS (SELECT 1 FROM pg_namespace n WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
                 AND n.nspname NOT LIKE 'pg_toast%' AND n.nspname NOT LIKE 'pg_temp%'
                 AND has_schema_privilege(n.oid, 'CREATE')) AS can_create
FROM pg_roles r WHERE r.rolname = current_user
"""
_PG_WARNINGS = {
    "rolsuper": "the account is a PostgreSQL superuser",
    "rolcreaterole": "the account can create roles",
    "rolcreatedb": "the account can create databases",
    "rolbypassrls": "the account bypasses row-level security",
    "read_files": "the account can read server files (pg_read_server_files)",
    "write_files": "the account can write server files (pg_write_server_files)",
    "run_programs": "the account can run server programs (pg_execute_server_program)",
    "can_write_tables": "the account can INSERT/UPDATE/DELETE/TRUNCATE tables",
    "can_create": "the account can CREATE objects in a schema",
}
_MYSQL_WRITE = re.compile(
    r"\b(ALL PRIVILEGES|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|INDEX|TRIGGER|EVENT|CREATE ROUTINE|ALTER ROUTINE|EXECUTE)\b"
)
_MYSQL_GRANT = re.compile(r"^GRANT (.+?) ON (\S+) TO", re.IGNORECASE)


def _pgsql(conn: Any) -> list[str]:
    with conn.cursor() as cur:
        cur.execute(_PG_CHECK)
        row = cur.fetchone()
        names = [d.name for d in cur.description]
    conn.rollback()
    if row is None:
        return ["the account's role could not be found in pg_roles"]
    flags = dict(zip(names, row))
    warnings = [text for key, text in _PG_WARNINGS.items() if flags.get(key)]
    if flags.get("rolsuper"):
        warnings.append("the account can read and write server files (superuser)")
    return warnings


def _mysql(conn: Any) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SHOW GRANTS FOR CURRENT_USER()")
        grants = [row[0] for row in cur.fetchall()]
    conn.rollback()
    warnings: list[str] = []
    for grant in grants:
        match = _MYSQL_GRANT.match(grant)
        if not match:
            continue
        privileges, scope = match.group(1).upper(), match.group(2)
        if "ALL PRIVILEGES" in privileges and scope == "*.*":
            warnings.append("the account has ALL PRIVILEGES on *.* (it can read and write server files)")
        elif re.search(r"\bFILE\b", privileges):
            warnings.append("the account has the FILE privilege (LOAD_FILE, SELECT ... INTO OUTFILE)")
        if re.search(r"\bSUPER\b", privileges):
            warnings.append("the account has the SUPER privilege")
        if _MYSQL_WRITE.search(privileges.replace("GRANT OPTION", "")):
            warnings.append(f"the account can write on {scope}")
        if "WITH GRANT OPTION" in grant.upper():
            warnings.append(f"the account can grant privileges on {scope}")
    return list(dict.fromkeys(warnings))


def _sqlite(conn: Any) -> list[str]:
    # Rewrite user_version with its own value inside a transaction we roll back: the write is
    # refused on a read-only (mode=ro or query_only) connection and never persists otherwise.
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    try:
        if not conn.in_transaction:
            conn.execute("BEGIN")
        conn.execute(f"PRAGMA user_version = {int(version)}")
    except Exception:  # noqa: BLE001 - sqlite3 raises OperationalError: read-only, as wanted
        return []
    finally:
        conn.rollback()
    return ["the SQLite file is opened writable (expected mode=ro)"]


def privilege_warnings(target: Any, conn: Any) -> list[str]:
    """Plain-language warnings about what the target's account could do beyond reading."""
    checker = {"pgsql": _pgsql, "mysql": _mysql, "sqlite": _sqlite}.get(target.protocol)
    if checker is None:
        return [f"unknown protocol {target.protocol!r}"]
    try:
        return checker(conn)
    except Exception as exc:  # noqa: BLE001 - a failed check must not take the target down
        log.warning("privilege check of target %s failed: %s", target.target_id, type(exc).__name__)
        with contextlib.suppress(Exception):
            conn.rollback()
        return ["the account's privileges could not be checked"]


CHECK_TIMEOUT_S = 2.0


def check_target(target: Target) -> list[str]:
    """Open one connection to the target (short timeout), check it, close it."""
    try:
        if target.protocol == "pgsql":
            conn = psycopg.connect(**connect.pg_kwargs(target, connect_timeout_s=CHECK_TIMEOUT_S))
        elif target.protocol == "mysql":
            conn = connect.connect_mysql(target, connect_timeout_s=CHECK_TIMEOUT_S, io_timeout_s=CHECK_TIMEOUT_S)
        else:
            conn = connect.connect_sqlite(target, timeout_s=CHECK_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - unreachable now is a warning, not a failed LOAD
        log.info("privilege check of target %s: cannot connect (%s)", target.target_id, type(exc).__name__)
        return ["privileges not checked: the target was unreachable when profiles were loaded"]
    try:
        return privilege_warnings(target, conn)
    finally:
        with contextlib.suppress(Exception):
            conn.close()
