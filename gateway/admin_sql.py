"""`admin.sql`: ProxySQL-style admin statements over the configuration store.

    SET <variable> = <value>                       edit the memory layer
    LOAD|SAVE <MODULE> TO|FROM RUNTIME|DISK|MEMORY the layer verbs (gateway.store)
    SELECT / INSERT / UPDATE / DELETE / REPLACE    one statement, on admin tables only
    SELECT ... FROM stats_mcp_query_digest_reset   reads the statistics and zeroes them (also
                                                   stats_mcp_query_rules_reset)

SQL runs on its own connection with an SQLite authorizer: writes reach only the memory
tables of declared modules, reads only admin, runtime and statistics tables; no ATTACH,
PRAGMA, DDL or transactions. Secrets never come back: `global_variables` and
`runtime_global_variables` are shadowed by TEMP views that mask secret variables (with
INSTEAD OF triggers so edits still work), the base tables cannot be named directly, and
secret columns (db_password, ...) read as NULL.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from typing import Any

import apsw

from gateway import audit, sqlite
from gateway.errors import InvalidArgument
from gateway.store import ConfigStore
from gateway.variables import MASK

VERB = re.compile(r"^\s*(LOAD|SAVE)\s+([A-Z ]+?)\s+(TO|FROM)\s+(RUNTIME|DISK|MEMORY)\s*;?\s*$", re.IGNORECASE)
SET = re.compile(r"^\s*SET\s+([A-Za-z0-9_.\-]+)\s*=\s*(.*?)\s*;?\s*$", re.IGNORECASE | re.DOTALL)
SQL_VERBS = ("SELECT", "INSERT", "UPDATE", "DELETE", "REPLACE", "WITH")
DEFAULT_MAX_ROWS = 1000
MASKED_VARIABLE_TABLES = ("global_variables", "runtime_global_variables")
# Reading one of these returns its statistics table and zeroes it (ProxySQL's *_reset twins).
RESET_TABLES = {"stats_mcp_query_digest_reset": "stats_mcp_query_digest", "stats_mcp_query_rules_reset": "stats_mcp_query_rules"}
# What a reset also zeroes: the per-caller counts of the digests it zeroes.
RESET_ALSO = {"stats_mcp_query_digest": ("stats_mcp_query_digest_callers",)}

_VERB_ACTIONS = {
    ("LOAD", "TO", "RUNTIME"): "load_to_runtime",
    ("LOAD", "FROM", "MEMORY"): "load_to_runtime",
    ("LOAD", "FROM", "DISK"): "load_from_disk",
    ("LOAD", "TO", "MEMORY"): "load_from_disk",
    ("SAVE", "TO", "DISK"): "save_to_disk",
    ("SAVE", "FROM", "MEMORY"): "save_to_disk",
    ("SAVE", "FROM", "RUNTIME"): "save_from_runtime",
    ("SAVE", "TO", "MEMORY"): "save_from_runtime",
}


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1].replace(value[0] * 2, value[0])
    return value


def _json_safe(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$bytes_b64": base64.b64encode(value).decode()}
    return value


class AdminSQL:
    def __init__(self, store: ConfigStore) -> None:
        self.store = store
        self.memory_tables = {t for m in store.modules.values() for t in m.tables}
        self.runtime_tables = {t for m in store.modules.values() for t in store.runtime_tables_of(m)}
        self.secret_columns = {
            (table, column)
            for m in store.modules.values()
            for table in (*m.tables, *store.runtime_tables_of(m))
            for column in m.secret_columns
        }
        self.secret_variables = sorted(name for name, v in store.variables.items() if v.secret)
        assert all(re.fullmatch(r"[a-z0-9_.\-]+", n) for n in self.secret_variables)

    def execute(
        self,
        statement: str,
        *,
        max_rows: int = DEFAULT_MAX_ROWS,
        actor: audit.Actor | None = None,
        secrets: Iterable[str] = (),
        runtime_variables: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Run one statement. With an `actor`, every statement but a plain SELECT is written to
        the audit trail, refused ones included, its literals masked where it touches a secret."""
        statement = statement.strip()
        if actor is None or statement[:6].upper() == "SELECT":
            return self._execute(statement, max_rows=max_rows)
        with audit.audited(
            self.store,
            actor,
            "admin.sql",
            {"statement": self._shown(statement)},
            secrets=secrets,
            runtime_variables=runtime_variables,
        ) as entry:
            result = self._execute(statement, max_rows=max_rows)
            entry.after = {k: result[k] for k in ("changes", "runtime_version", "message") if result.get(k) is not None}
            return result

    def _shown(self, statement: str) -> str:
        """The statement as the audit trail keeps it: a secret variable's new value masked."""
        if (set_match := SET.match(statement)) and (decl := self.store.variables.get(set_match.group(1))) and decl.secret:
            return f"SET {set_match.group(1)} = '{MASK}'"
        return audit.mask_sql(statement)

    def _execute(self, statement: str, *, max_rows: int) -> dict[str, Any]:
        if not statement:
            raise InvalidArgument("empty statement")
        if verb := VERB.match(statement):
            return self._verb(*verb.groups())
        if set_match := SET.match(statement):
            name, value = set_match.group(1), _unquote(set_match.group(2))
            self.store.set_variable(name, value)
            return {
                "ok": True,
                "message": f"{name} set in memory; LOAD MCP VARIABLES TO RUNTIME applies it, SAVE MCP VARIABLES TO DISK keeps it",
            }
        first_word = statement.split(None, 1)[0].upper()
        if first_word not in SQL_VERBS:
            raise InvalidArgument(
                f"unsupported admin statement {first_word!r}; use SET, LOAD, SAVE, SELECT, INSERT, UPDATE, DELETE or REPLACE"
            )
        if len(list(sqlite.iter_statements(statement))) != 1:
            raise InvalidArgument("exactly one statement per call")
        return self._sql(statement, max_rows=max_rows)

    def _verb(self, action: str, module: str, direction: str, layer: str) -> dict[str, Any]:
        method = _VERB_ACTIONS.get((action.upper(), direction.upper(), layer.upper()))
        if method is None:
            raise InvalidArgument(f"{action} ... {direction} {layer} is not a verb; see LOAD/SAVE in the README")
        verb = f"{action.upper()} {' '.join(module.upper().split())} {direction.upper()} {layer.upper()}"
        if method == "load_to_runtime":
            version, warnings = self.store.load_to_runtime_warning(module)
            message = f"{verb} done" if not warnings else f"{verb} done, with {len(warnings)} warning(s): {'; '.join(warnings)}"
            return {"ok": True, "message": message, "runtime_version": version, "warnings": warnings}
        getattr(self.store, method)(module)
        return {"ok": True, "message": f"{verb} done"}

    # -- SQL under the authorizer ----------------------------------------------------------
    def _connection(self) -> apsw.Connection:
        conn = sqlite.connect(self.store.config_path)
        conn.execute("ATTACH DATABASE ? AS disk", (str(self.store.disk_path),))
        urls = {n for n in self.secret_variables if self.store.variables[n].kind == "url"}
        secrets = ", ".join(f"'{n}'" for n in self.secret_variables if n not in urls) or "''"
        url_secrets = ", ".join(f"'{n}'" for n in sorted(urls)) or "''"

        def masked(prefix: str = "") -> str:
            # A URL is masked whole here, but only when it carries credentials (user:password@, password=).
            name, value = f"{prefix}variable_name", f"{prefix}variable_value"
            return (
                f"CASE WHEN {name} IN ({secrets}) AND {value} <> '' THEN '{MASK}'"
                f" WHEN {name} IN ({url_secrets}) AND (instr({value}, '@') > 0"
                f" OR instr(lower({value}), 'password=') > 0) THEN '{MASK}' ELSE {value} END"
            )

        # Where each runtime value comes from (ConfigStore.variable_origins), as a column of the runtime view.
        conn.execute("CREATE TEMP TABLE variable_origin (variable_name TEXT PRIMARY KEY, origin TEXT NOT NULL)")
        conn.executemany("INSERT INTO temp.variable_origin VALUES (?, ?)", list(self.store.variable_origins().items()))
        conn.execute(
            f"CREATE TEMP VIEW global_variables AS SELECT variable_name, {masked()} AS variable_value FROM main.global_variables"
        )
        conn.execute(
            f"CREATE TEMP VIEW runtime_global_variables AS SELECT r.variable_name, {masked('r.')} AS variable_value, "
            "COALESCE(o.origin, 'default') AS origin FROM main.runtime_global_variables r "
            "LEFT JOIN temp.variable_origin o ON o.variable_name = r.variable_name"
        )
        conn.execute(
            """
            CREATE TEMP TRIGGER gv_insert INSTEAD OF INSERT ON temp.global_variables BEGIN
                INSERT OR REPLACE INTO main.global_variables VALUES (NEW.variable_name, NEW.variable_value);
            END;
            CREATE TEMP TRIGGER gv_update INSTEAD OF UPDATE ON temp.global_variables BEGIN
                UPDATE main.global_variables SET variable_name = NEW.variable_name, variable_value = NEW.variable_value
                WHERE variable_name = OLD.variable_name;
            END;
            CREATE TEMP TRIGGER gv_delete INSTEAD OF DELETE ON temp.global_variables BEGIN
                DELETE FROM main.global_variables WHERE variable_name = OLD.variable_name;
            END;
            """
        )
        conn.authorizer = self._authorize
        return conn

    def _authorize(self, op: int, p1: str | None, p2: str | None, db: str | None, inner: str | None) -> int:
        if op in (apsw.SQLITE_SELECT, apsw.SQLITE_RECURSIVE):
            return apsw.SQLITE_OK
        if op == apsw.SQLITE_FUNCTION:
            return (
                apsw.SQLITE_DENY
                if (p2 or "").lower() in ("load_extension", "readfile", "writefile", "fts3_tokenizer")
                else apsw.SQLITE_OK
            )
        if op == apsw.SQLITE_READ:
            table = p1 or ""
            if (table, p2) in self.secret_columns:
                return apsw.SQLITE_IGNORE
            if table in MASKED_VARIABLE_TABLES:
                # Only through the masking TEMP views (or their triggers), never the base tables.
                return apsw.SQLITE_OK if db == "temp" or inner is not None else apsw.SQLITE_DENY
            if db == "temp" and table == "variable_origin":
                return apsw.SQLITE_OK
            if db == "disk" and table == "global_variables":
                return apsw.SQLITE_DENY
            readable = (
                table in self.memory_tables
                or table in self.runtime_tables
                or table.startswith("stats_")
                or table in ("runtime_state", "sqlite_master", "sqlite_schema")
                or table in ("mcp_audit_log", "mcp_tokens", "runtime_workers")  # read-only: never in memory_tables
            )
            return apsw.SQLITE_OK if readable else apsw.SQLITE_DENY
        if op in (apsw.SQLITE_INSERT, apsw.SQLITE_UPDATE, apsw.SQLITE_DELETE):
            table = p1 or ""
            if table == "global_variables" and (db == "temp" or (db == "main" and inner is not None)):
                return apsw.SQLITE_OK
            if db == "main" and table in self.memory_tables and table != "global_variables":
                return apsw.SQLITE_OK
            if db == "main" and op == apsw.SQLITE_DELETE and table.startswith("stats_"):
                return apsw.SQLITE_OK  # resetting statistics
            return apsw.SQLITE_DENY
        return apsw.SQLITE_DENY  # ATTACH, PRAGMA, DDL, transactions, ...

    def _sql(self, statement: str, *, max_rows: int) -> dict[str, Any]:
        conn = self._connection()
        resets = [name for name in RESET_TABLES if re.search(rf"\b{name}\b", statement, re.IGNORECASE)]
        try:
            if resets:
                self._snapshot_for_reset(conn, resets)
            total_before = conn.total_changes()
            try:
                cursor = conn.execute(statement)
                columns: list[str] = []
                rows: list[list[Any]] = []
                truncated = False
                for row in cursor:
                    if not columns:
                        columns = [d[0] for d in cursor.getdescription()]
                    if len(rows) >= max_rows:
                        truncated = True
                        break
                    rows.append([_json_safe(v) for v in row])
                if not columns:
                    try:
                        columns = [d[0] for d in cursor.getdescription()]
                    except apsw.ExecutionCompleteError:
                        columns = []
            except apsw.AuthError:
                raise InvalidArgument(
                    "not allowed: admin SQL reaches only admin tables (memory tables to write, runtime/stats tables to read)"
                ) from None
            except apsw.SQLError as exc:
                raise InvalidArgument(f"SQL error: {exc}") from None  # SQLite's own message about our own tables
            except apsw.ConstraintError as exc:
                raise InvalidArgument(f"constraint failed: {exc}") from None
            # changes() keeps the count of the last write on this connection: a statement that wrote nothing reports 0
            changes = conn.changes() if conn.total_changes() != total_before else 0
            cursor.close()
            if resets:
                self._zero(conn, resets)
            return {"columns": columns, "rows": rows, "row_count": len(rows), "truncated": truncated, "changes": changes}
        finally:
            if resets and conn.in_transaction:
                conn.authorizer = None
                conn.execute("ROLLBACK")  # the statement failed: nothing is zeroed
            conn.close()

    def _snapshot_for_reset(self, conn: apsw.Connection, resets: list[str]) -> None:
        """ProxySQL's read-and-zero tables: inside one transaction, each *_reset name becomes a TEMP
        copy of its statistics table; the statement reads the copy, then _zero empties the original
        and commits. A statement that fails rolls back and zeroes nothing."""
        conn.authorizer = None
        conn.execute("BEGIN IMMEDIATE")
        for name in resets:
            conn.execute(f"CREATE TEMP TABLE {name} AS SELECT * FROM main.{RESET_TABLES[name]}")
        conn.authorizer = self._authorize

    def _zero(self, conn: apsw.Connection, resets: list[str]) -> None:
        conn.authorizer = None
        for name in resets:
            conn.execute(f"DELETE FROM main.{RESET_TABLES[name]}")
            for also in RESET_ALSO.get(RESET_TABLES[name], ()):
                conn.execute(f"DELETE FROM main.{also}")
        conn.execute("COMMIT")
