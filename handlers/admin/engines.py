"""Account and process administration on MariaDB/MySQL and PostgreSQL, in each engine's SQL.

Runs on a short-lived session opened with the target's own credentials, without the
read-only settings of the query path (these statements write, by design) and with a 10 s
statement timeout. Nothing is left half-done: PostgreSQL work runs in one transaction and
is checked before it commits (a GRANT the account may not make is only a WARNING there);
on MariaDB, where DDL commits at once, a user whose grant fails is dropped again.

Driver errors are translated here. A permission error names the privilege the target's
account lacks; other driver messages are not passed on (they may quote the statement,
password included), only their code.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pymysql
from psycopg import sql

from backends.engines.mysql import connect_session as connect_mysql
from backends.engines.postgresql import connect_kwargs as pg_kwargs
from backends.targets import Target
from gateway.errors import GatewayError, InvalidArgument, NotFound, PermissionDenied, Unavailable

STATEMENT_TIMEOUT_MS = 10_000
CONNECT_TIMEOUT_S = 5.0
STATEMENT_CHARS = 2000  # a listed statement is cut here
KILL_RESEND_S = 0.25  # a statement still running this long after a cancel gets another
KILL_WAIT_S = 3.0
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")
# MariaDB/MySQL error codes that mean "not allowed".
MYSQL_DENIED = {1044, 1045, 1142, 1143, 1227, 1095, 1410, 1370}


@dataclass(frozen=True)
class Process:
    process_id: int
    user: str
    host: str
    database: str
    state: str
    time_s: float
    statement: str
    started_at: float  # unix time its run began (PostgreSQL: its transaction, which a pipeline's steps share)


@dataclass(frozen=True)
class Account:
    username: str
    host: str
    can_login: bool
    attributes: list[str]


# -- sessions and errors ------------------------------------------------------------------------


@contextlib.contextmanager
def session(target: Target) -> Iterator[Any]:
    """A writable administration session on the target, as its auth profile's account."""
    try:
        if target.protocol == "mysql":
            conn: Any = connect_mysql(target, connect_timeout_s=CONNECT_TIMEOUT_S, io_timeout_s=STATEMENT_TIMEOUT_MS / 1000 + 5)
            with conn.cursor() as cur:
                cur.execute("SET SESSION TRANSACTION READ WRITE")
                if "mariadb" in conn.get_server_info().lower():
                    cur.execute("SET SESSION max_statement_time = %s", (STATEMENT_TIMEOUT_MS / 1000,))
        else:
            kwargs = pg_kwargs(target, connect_timeout_s=CONNECT_TIMEOUT_S)
            kwargs.update(options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}", application_name="mcp-gateway-admin")
            conn = psycopg.connect(**kwargs, autocommit=True)
    except (pymysql.err.MySQLError, psycopg.Error, OSError) as exc:
        raise Unavailable(
            f"cannot connect to target {target.target_id!r} as its auth profile's account ({type(exc).__name__})"
        ) from exc
    try:
        yield conn
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def translate(exc: Exception, *, needs: str, secrets: tuple[str, ...] = ()) -> GatewayError:
    """A driver error as a gateway error; `needs` names the privilege the operation requires."""
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, pymysql.err.MySQLError) and exc.args and isinstance(exc.args[0], int):
        code = exc.args[0]
        detail = _scrub(str(exc.args[1]) if len(exc.args) > 1 else "", secrets)
        if code in MYSQL_DENIED:
            return PermissionDenied(f"the target's account lacks {needs} (MariaDB {code}: {detail})")
        if code in (1396,):
            return InvalidArgument("the operation failed: the user already exists (or, for a drop, does not)")
        if code in (1094,):
            return NotFound("no such process")
        if code in (1133,):
            return NotFound("no such user (create it first)")
        return Unavailable(f"the target refused the operation (MariaDB error {code})")
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return PermissionDenied(f"the target's account lacks {needs} (PostgreSQL: {_scrub(str(exc).splitlines()[0], secrets)})")
    if isinstance(exc, psycopg.errors.DuplicateObject):
        return InvalidArgument("the role already exists")
    if isinstance(exc, psycopg.errors.UndefinedObject):
        return NotFound("no such role or object (create it first)")
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return NotFound("no such table or schema")
    if isinstance(exc, psycopg.Error):
        return Unavailable(f"the target refused the operation (PostgreSQL SQLSTATE {exc.sqlstate})")
    return Unavailable(f"the operation failed ({type(exc).__name__})")


def _scrub(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "********")
    return text


# -- passwords: sent as the server stores them, so the plain text is in no statement (logs, process lists)


def mysql_native_hash(password: str) -> str:
    """mysql_native_password's stored form: '*' + hex(SHA1(SHA1(password)))."""
    return "*" + hashlib.sha1(hashlib.sha1(password.encode()).digest()).hexdigest().upper()  # noqa: S324 - the protocol's own


def scram_sha_256(password: str, *, iterations: int = 4096, salt: bytes | None = None) -> str:
    """PostgreSQL's stored SCRAM-SHA-256 verifier (RFC 5802/7677), as `CREATE ROLE ... PASSWORD` accepts it."""
    salt = salt or os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    b64 = base64.b64encode
    return f"SCRAM-SHA-256${iterations}:{b64(salt).decode()}${b64(stored_key).decode()}:{b64(server_key).decode()}"


# -- processes --------------------------------------------------------------------------------------


def processes(target: Target, conn: Any) -> list[Process]:
    """Statements running now (idle sessions left out), as far as the account may see."""
    if target.protocol == "mysql":
        elapsed = "TIME_MS / 1000" if "mariadb" in conn.get_server_info().lower() else "TIME"
        with conn.cursor() as cur:
            cur.execute(
                f"SELECT ID, USER, HOST, DB, COMMAND, STATE, {elapsed}, LEFT(INFO, %s), UNIX_TIMESTAMP(NOW(6)) - {elapsed} "
                "FROM information_schema.PROCESSLIST "
                f"WHERE ID <> CONNECTION_ID() AND COMMAND NOT IN ('Sleep', 'Daemon', 'Binlog Dump') ORDER BY {elapsed} DESC",
                (STATEMENT_CHARS,),
            )
            found = cur.fetchall()
        return [
            Process(
                process_id=int(r[0]),
                user=r[1] or "",
                host=r[2] or "",
                database=r[3] or "",
                state=f"{r[4]}: {r[5] or ''}".strip(": "),
                time_s=float(r[6] or 0),
                statement=r[7] or "",
                started_at=float(r[8] or 0),
            )
            for r in found
        ]
    found = conn.execute(
        "SELECT pid, usename, COALESCE(client_addr::text, 'local'), datname, state, "
        "EXTRACT(EPOCH FROM clock_timestamp() - query_start), left(query, %s), "
        "EXTRACT(EPOCH FROM COALESCE(xact_start, query_start)) FROM pg_stat_activity "
        "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend' AND state <> 'idle' "
        "ORDER BY query_start",
        (STATEMENT_CHARS,),
    ).fetchall()
    return [
        Process(int(r[0]), r[1] or "", r[2], r[3] or "", r[4] or "", float(r[5] or 0), r[6] or "", float(r[7] or 0))
        for r in found
    ]


def process(target: Target, conn: Any, process_id: int) -> Process | None:
    return next((p for p in processes(target, conn) if p.process_id == process_id), None)


def kill_query(target: Target, conn: Any, running: Process) -> None:
    """Cancel the statement the process runs (its connection stays open), and return once it
    has stopped. A cancel that lands between protocol messages (PostgreSQL reads the next one of
    a pipeline) is dropped by the server, so it is sent again until the statement is gone."""
    needs = (
        "CONNECTION ADMIN or SUPER (to kill another account's query)"
        if target.protocol == "mysql"
        else "membership in pg_signal_backend or the process's role"
    )
    deadline = time.monotonic() + KILL_WAIT_S
    try:
        while True:
            if target.protocol == "mysql":
                with conn.cursor() as cur:
                    cur.execute("KILL QUERY %s", (running.process_id,))
            elif not conn.execute("SELECT pg_cancel_backend(%s)", (running.process_id,)).fetchone()[0]:
                return  # the process is gone
            resend = time.monotonic() + KILL_RESEND_S
            while time.monotonic() < resend:
                if not _still_running(target, conn, running):
                    return
                time.sleep(0.02)
            if time.monotonic() > deadline:
                raise Unavailable(f"process {running.process_id} still runs its statement {KILL_WAIT_S:.0f} s after the kill")
    except Exception as exc:
        raise translate(exc, needs=needs) from exc


def _still_running(target: Target, conn: Any, running: Process) -> bool:
    now = process(target, conn, running.process_id)
    if now is None or now.statement != running.statement:
        return False  # gone, or running something else
    if target.protocol == "mysql":
        return now.time_s >= running.time_s
    # PostgreSQL restarts query_start at each protocol step of a statement (parse, bind,
    # execute); its transaction start tells one run from the next. It keeps the text of a
    # cancelled statement while the session sits in the aborted transaction: not running.
    return now.state == "active" and abs(now.started_at - running.started_at) < 0.001


# -- accounts ------------------------------------------------------------------------------------------


def accounts(target: Target, conn: Any) -> list[Account]:
    try:
        if target.protocol == "mysql":
            with conn.cursor() as cur:
                cur.execute("SELECT User, Host, is_role FROM mysql.user ORDER BY User, Host")
                return [Account(r[0], r[1], r[2] != "Y", ["role"] if r[2] == "Y" else []) for r in cur.fetchall()]
        found = conn.execute(
            "SELECT rolname, rolcanlogin, rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls "
            "FROM pg_roles WHERE rolname !~ '^pg_' ORDER BY rolname"
        ).fetchall()
    except Exception as exc:
        raise translate(exc, needs="SELECT on mysql.user" if target.protocol == "mysql" else "read access to pg_roles") from exc
    names = ("superuser", "createrole", "createdb", "replication", "bypassrls")
    return [Account(r[0], "", bool(r[1]), [n for n, flag in zip(names, r[2:]) if flag]) for r in found]


def _pg_scope(target: Target, on: str) -> tuple[str, str | None]:
    """`*` -> (default schema, None); `s.*` -> (s, None); `s.t` -> (s, t)."""
    if on == "*":
        return target.default_schema or "public", None
    schema, _, table = on.partition(".")
    return schema, (None if table == "*" else table)


def _mysql_scope(target: Target, on: str) -> str:
    if on == "*":
        database = target.database or target.default_schema
        if not database:
            raise InvalidArgument(f"target {target.target_id!r} names no database: give on as <database>.* or <database>.<table>")
        return f"`{database}`.*"
    if on == "*.*":
        return "*.*"
    schema, _, table = on.partition(".")
    return f"`{schema}`.*" if table == "*" else f"`{schema}`.`{table}`"


def create_user(target: Target, conn: Any, *, username: str, password: str, host: str, read_only: bool) -> list[str]:
    """Create a login; with read_only, grant it SELECT on the target's database (MariaDB) or
    USAGE + SELECT on the default schema's tables (PostgreSQL). Returns what was granted."""
    secrets = (password,)
    if target.protocol == "mysql":
        scope = _mysql_scope(target, "*") if read_only else ""
        try:
            with conn.cursor() as cur:
                if "mariadb" in conn.get_server_info().lower():
                    cur.execute("CREATE USER %s@%s IDENTIFIED BY PASSWORD %s", (username, host, mysql_native_hash(password)))
                else:  # MySQL 8 dropped IDENTIFIED BY PASSWORD; its default plugin salts the hash itself
                    cur.execute("CREATE USER %s@%s IDENTIFIED BY %s", (username, host, password))
        except Exception as exc:
            raise translate(exc, needs="the CREATE USER privilege", secrets=secrets) from exc
        if not read_only:
            return []
        try:
            with conn.cursor() as cur:
                cur.execute(f"GRANT SELECT ON {scope} TO %s@%s", (username, host))
        except Exception as exc:
            with contextlib.suppress(Exception), conn.cursor() as cur:
                cur.execute("DROP USER %s@%s", (username, host))  # nothing half-done
            raise translate(exc, needs=f"SELECT with GRANT OPTION on {scope} (the user was not kept)", secrets=secrets) from exc
        return [f"SELECT ON {scope}"]
    schema = target.default_schema or "public"
    try:
        with conn.transaction():
            role = sql.Identifier(username)
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(role, sql.Literal(scram_sha_256(password))))
            if not read_only:
                return []
            _pg_grant(conn, username, ["SELECT"], schema, None)
    except Exception as exc:
        raise translate(exc, needs="CREATEROLE and the right to grant SELECT", secrets=secrets) from exc
    return [f"USAGE ON SCHEMA {schema}", f"SELECT ON ALL TABLES IN SCHEMA {schema}"]


def grant(
    target: Target, conn: Any, *, username: str, host: str, privileges: list[str], on: str, role_privileges: list[str]
) -> str:
    """Grant table-level privileges on `on` and any role privileges (already allowed by the caller)."""
    if target.protocol == "mysql":
        scope = _mysql_scope(target, on)
        try:
            with conn.cursor() as cur:
                if privileges:
                    cur.execute(f"GRANT {', '.join(privileges)} ON {scope} TO %s@%s", (username, host))
                if role_privileges:
                    cur.execute(f"GRANT {', '.join(role_privileges)} ON *.* TO %s@%s", (username, host))
        except Exception as exc:
            raise translate(exc, needs=f"{', '.join(privileges + role_privileges)} WITH GRANT OPTION on {scope}") from exc
        return scope
    schema, table = _pg_scope(target, on)
    try:
        with conn.transaction():
            if privileges:
                _pg_grant(conn, username, privileges, schema, table)
            for privilege in role_privileges:
                if privilege.startswith("PG_"):
                    conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(privilege.lower()), sql.Identifier(username)))
                else:
                    conn.execute(sql.SQL("ALTER ROLE {} WITH " + privilege).format(sql.Identifier(username)))
    except Exception as exc:
        raise translate(exc, needs=f"the right to grant {', '.join(privileges + role_privileges)} on {on}") from exc
    return f"{schema}.{table or '*'}"


def _pg_grant(conn: Any, username: str, privileges: list[str], schema: str, table: str | None) -> None:
    """GRANT inside the caller's transaction, then check it took: PostgreSQL answers a GRANT
    the account may not make with a WARNING, not an error. Raises PermissionDenied (rolled back)."""
    role, nsp = sql.Identifier(username), sql.Identifier(schema)
    privs = sql.SQL(", ").join(sql.SQL(p) for p in privileges)
    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(nsp, role))
    if table is None:
        conn.execute(sql.SQL("GRANT {} ON ALL TABLES IN SCHEMA {} TO {}").format(privs, nsp, role))
    else:
        conn.execute(sql.SQL("GRANT {} ON TABLE {}.{} TO {}").format(privs, nsp, sql.Identifier(table), role))
    missing = conn.execute(
        "SELECT c.relname, p.priv FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, unnest(%s::text[]) AS p(priv) "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND (%s::text IS NULL OR c.relname = %s) "
        "AND NOT has_table_privilege(%s, c.oid, p.priv) ORDER BY 1, 2 LIMIT 5",
        (privileges, schema, table, table, username),
    ).fetchall()
    if not conn.execute("SELECT has_schema_privilege(%s, %s, 'USAGE')", (username, schema)).fetchone()[0]:
        missing.insert(0, (f"schema {schema}", "USAGE"))
    if missing:
        shown = ", ".join(f"{priv} on {name}" for name, priv in missing)
        raise PermissionDenied(
            f"the target's account may not grant {shown} (it needs to own them or hold them WITH GRANT OPTION); nothing was changed"
        )
