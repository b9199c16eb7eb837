"""The configuration store: ProxySQL's three layers over SQLite files in the data directory.

    memory   config.db main tables      what admins edit (INSERT/UPDATE/SET)
    runtime  config.db runtime_* tables what serves; mirrored into each worker's `Runtime`
    disk     disk.db (attached as disk) what survives a restart

Verbs move one *module* (a named group of tables) between layers:
    LOAD <module> TO RUNTIME   memory -> runtime  (validate everything, then swap atomically)
    LOAD <module> FROM DISK    disk -> memory
    SAVE <module> TO DISK      memory -> disk
    SAVE <module> FROM RUNTIME runtime -> memory
Aliases as in ProxySQL: LOAD .. FROM MEMORY = TO RUNTIME, LOAD .. TO MEMORY = FROM DISK,
SAVE .. FROM MEMORY = TO DISK, SAVE .. TO MEMORY = FROM RUNTIME.

`MCP VARIABLES` is the core module; handlers add theirs (`MCP PROFILES`, `MCP QUERY RULES`,
`RAG SOURCES`) through `ToolHandler.config_modules`. A module's `build` validates memory rows
and returns the rows of its runtime tables, so a LOAD that does not validate changes nothing.

With a cluster attached (`mcp-cluster_dsn`, gateway/cluster.py) the disk layer is PostgreSQL's
and a LOAD TO RUNTIME is published there before it applies here (gateway/cluster_layers.py).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from gateway import cluster_layers, sqlite
from gateway.cluster import ClusterDatabase, ClusterLink, ClusterModule, member_id
from gateway.errors import ConfigError, NotFound, Unavailable
from gateway.runtime import Runtime, build_runtime
from gateway.variables import Variable

# build(memory rows by table, variables) -> runtime rows by runtime table name
BuildFn = Callable[[Mapping[str, list[dict[str, Any]]], Mapping[str, Variable]], dict[str, list[dict[str, Any]]]]
# warnings(runtime rows by runtime table name) -> what a LOAD of them should tell the admin
WarningsFn = Callable[[Mapping[str, list[dict[str, Any]]]], list[str]]

log = logging.getLogger("mcp_gateway.store")


@dataclass(frozen=True)
class ConfigModule:
    name: str  # as spelled in the verbs, e.g. "MCP PROFILES"
    tables: tuple[str, ...]  # memory/disk table names; runtime twins are runtime_<name>
    build: BuildFn
    runtime_tables: tuple[str, ...] = ()  # defaults to runtime_<table> for each table
    secret_columns: tuple[str, ...] = ()  # read as NULL through admin.sql (e.g. db_password)
    warnings: WarningsFn | None = None  # LOAD ... TO RUNTIME answers (and logs) these
    # Checks memory rows as build does, minus build's side effects (connecting to a target):
    # what a structured edit runs before it commits. None: build itself is side-effect free.
    validate: BuildFn | None = None
    # Runtime tables of other modules that build and validate see beside the memory rows (e.g.
    # the targets a custom tool names): what serves when the LOAD runs.
    reads: tuple[str, ...] = ()


def _build_variables(
    memory: Mapping[str, list[dict[str, Any]]], declarations: Mapping[str, Variable]
) -> dict[str, list[dict[str, Any]]]:
    stored = {row["variable_name"]: row["variable_value"] for row in memory["global_variables"]}
    unknown = sorted(set(stored) - set(declarations))
    if unknown:
        raise ConfigError(f"unknown variable(s): {', '.join(unknown)}")
    errors = []
    for name, decl in declarations.items():
        try:
            decl.parse(stored.get(name))
        except ConfigError as exc:
            errors.append(str(exc))
    if errors:
        raise ConfigError("; ".join(errors), details=errors)
    return {
        "runtime_global_variables": [
            {"variable_name": name, "variable_value": stored.get(name, decl.default)} for name, decl in declarations.items()
        ]
    }


VARIABLES_MODULE = ConfigModule("MCP VARIABLES", ("global_variables",), _build_variables)


class ConfigStore:
    """One per process; connections are per thread (apsw connections are not shared)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        variables: Mapping[str, Variable],
        modules: list[ConfigModule],
        cluster_database: ClusterDatabase | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.config_path = self.data_dir / "config.db"
        self.disk_path = self.data_dir / "disk.db"
        self.variables = dict(variables)
        self.modules = {m.name: m for m in [VARIABLES_MODULE, *modules]}
        self._local = threading.local()
        self.cluster: ClusterLink | None = None
        self.cluster_database = cluster_database  # the PostgreSQL driver a cluster runs on (gateway.assembly)

    def attach_cluster(self, dsn: str, member_id: str) -> None:
        """Share the disk layer and every LOAD with the cluster in `dsn` ("" detaches)."""
        if dsn and self.cluster_database is None:
            raise Unavailable("this config store has no cluster database driver (open it with gateway.assembly.open_store)")
        self.cluster = ClusterLink(dsn, member_id, self.cluster_database) if dsn and self.cluster_database else None

    def attach_cluster_from_runtime(self) -> None:
        """Workers and the CLI: join the cluster this instance's runtime names (startup joined it)."""
        if not self.config_path.exists():
            return
        rows = sqlite.rows(self.conn(), "SELECT variable_name, variable_value FROM main.runtime_global_variables")
        raw = {r["variable_name"]: r["variable_value"] for r in rows}
        if raw.get("mcp-cluster_dsn"):
            self.attach_cluster(raw["mcp-cluster_dsn"], member_id(raw))

    # -- connections -----------------------------------------------------------------------
    def conn(self) -> apsw.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite.connect(self.config_path)
            conn.execute("ATTACH DATABASE ? AS disk", (str(self.disk_path),))
            self._local.conn = conn
        return conn

    def initialize(self) -> bool:
        """Create the data directory and tables. Returns True when the disk layer is new."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.data_dir, 0o700)  # tokens and credentials live here
        fresh = not self.disk_path.exists()
        ddl = sqlite.schema_section("admin")
        for path in (self.config_path, self.disk_path):
            conn = sqlite.connect(path)
            for statement in sqlite.iter_statements(ddl):
                conn.execute(statement)
            add_missing_columns(conn, ddl)
            if path == self.config_path:  # the audit trail, token metadata, workers: not layered
                state = sqlite.schema_section("admin_state")
                for statement in sqlite.iter_statements(state):
                    conn.execute(statement)
                add_missing_columns(conn, state)
            conn.close()
            os.chmod(path, 0o600)
        conn = self.conn()
        for statement in sqlite.iter_statements(sqlite.schema_section("variable_overrides")):
            conn.execute(statement)  # config.db only: the last start's overrides
        conn.execute("INSERT OR IGNORE INTO runtime_state(id, version, loaded_at) VALUES (1, 0, 0)")
        self._fill_variable_defaults()
        return fresh

    def _fill_variable_defaults(self) -> None:
        """Memory lists every declared variable, as ProxySQL's does, so admins can UPDATE any."""
        conn = self.conn()
        for name, decl in self.variables.items():
            conn.execute("INSERT OR IGNORE INTO main.global_variables VALUES (?, ?)", (name, decl.default))

    def module(self, name: str) -> ConfigModule:
        key = " ".join(name.upper().split())
        if key not in self.modules:
            raise NotFound(f"no configuration module {name!r}; known: {', '.join(sorted(self.modules))}")
        return self.modules[key]

    def runtime_tables_of(self, module: ConfigModule) -> tuple[str, ...]:
        return module.runtime_tables or tuple(f"runtime_{t}" for t in module.tables)

    # -- the four verbs --------------------------------------------------------------------
    def load_to_runtime(self, name: str, *, publish: bool = True) -> int:
        """memory -> runtime, validated first. Returns the new runtime version."""
        return self.load_to_runtime_warning(name, publish=publish)[0]

    def load_to_runtime_warning(self, name: str, *, publish: bool = True) -> tuple[int, list[str]]:
        """`load_to_runtime`, also returning the module's warnings about what now serves (a
        target whose account can write, one that is skipped ...), which are logged as well.

        With a cluster, the validated rows are published first (UNAVAILABLE when PostgreSQL
        cannot be reached: then nothing changed anywhere); `publish=False` applies locally only."""
        module = self.module(name)
        conn = self.conn()
        with sqlite.transaction(conn):
            memory = cluster_layers.module_rows(conn, "main", module.tables)
            context = {**memory, **cluster_layers.module_rows(conn, "main", module.reads)} if module.reads else memory
            runtime_rows = module.build(context, self.variables)  # raises ConfigError: nothing changed
            if self.cluster is not None and publish:
                shared = cluster_layers.shared(self, memory), cluster_layers.shared(self, runtime_rows)
                cluster_layers.record_applied(conn, module.name, self.cluster.publish(module.name, *shared))
            for table in self.runtime_tables_of(module):
                conn.execute(f"DELETE FROM main.{table}")
                for row in runtime_rows.get(table, []):
                    cols = list(row)
                    conn.execute(
                        f"INSERT INTO main.{table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                        [row[c] for c in cols],
                    )
            version = self.bump_runtime_version(conn)
        warnings = module.warnings(runtime_rows) if module.warnings else []
        for warning in warnings:
            log.warning("LOAD %s TO RUNTIME: %s", module.name, warning)
        return version, warnings

    def bump_runtime_version(self, conn: apsw.Connection) -> int:
        """Inside a write transaction: the next runtime version, which every worker polls."""
        conn.execute("UPDATE runtime_state SET version = version + 1, loaded_at = ? WHERE id = 1", (time.time(),))
        return int(sqlite.scalar(conn, "SELECT version FROM runtime_state WHERE id = 1"))

    def _copy(
        self,
        module: ConfigModule,
        source: str,
        target: str,
        tables: tuple[str, ...] | None = None,
        source_tables: tuple[str, ...] | None = None,
    ) -> None:
        conn = self.conn()
        with sqlite.transaction(conn):
            for src_table, dst_table in zip(source_tables or module.tables, tables or module.tables):
                dst_cols = [r["name"] for r in sqlite.rows(conn, f"PRAGMA {target}.table_info({dst_table})")]
                src_cols = {r["name"] for r in sqlite.rows(conn, f"PRAGMA {source}.table_info({src_table})")}
                cols = ", ".join(c for c in dst_cols if c in src_cols)
                conn.execute(f"DELETE FROM {target}.{dst_table}")
                conn.execute(f"INSERT INTO {target}.{dst_table} ({cols}) SELECT {cols} FROM {source}.{src_table}")

    def load_from_disk(self, name: str) -> None:
        module = self.module(name)
        self._copy(module, "disk", "main")  # local variables come from here in a cluster too
        if self.cluster is not None:
            cluster_layers.load_disk(self, module)
        if module is VARIABLES_MODULE:
            self._fill_variable_defaults()

    def save_to_disk(self, name: str) -> None:
        module = self.module(name)
        if self.cluster is not None:  # first: unreachable means UNAVAILABLE and nothing saved
            cluster_layers.save_disk(self, module)
        self._copy(module, "main", "disk")

    def save_from_runtime(self, name: str) -> None:
        module = self.module(name)
        self._copy(module, "main", "main", tables=module.tables, source_tables=self.runtime_tables_of(module))

    # -- variables in the memory layer -----------------------------------------------------
    def set_variable(self, name: str, value: str, *, layer: str = "main") -> None:
        decl = self.variables.get(name)
        if decl is None:
            raise NotFound(f"unknown variable {name!r}")
        decl.parse(value)  # refuse a bad value at once, not only at LOAD
        self.conn().execute(
            f"INSERT INTO {layer}.global_variables(variable_name, variable_value) VALUES (?, ?) "
            "ON CONFLICT(variable_name) DO UPDATE SET variable_value = excluded.variable_value",
            (name, str(value)),
        )

    def set_overrides(self, overrides: Mapping[str, tuple[str, str]]) -> None:
        """Put each `name: (value, origin)` in memory and record where it came from (replacing the
        records of the last start). Origins: "environment", "command line"."""
        conn = self.conn()
        with sqlite.transaction(conn):
            for name, (value, origin) in overrides.items():
                self.set_variable(name, value)
                conn.execute("INSERT OR REPLACE INTO variable_overrides VALUES (?, ?, ?)", (name, str(value), origin))

    def clear_overrides(self) -> None:
        self.conn().execute("DELETE FROM variable_overrides")

    def variable_origins(self, runtime_values: Mapping[str, str] | None = None) -> dict[str, str]:
        """Where each runtime value comes from: "command line" or "environment" (an override of
        the last start, still in effect), "disk" (what disk holds, unless it is the default),
        "default", or "memory" (an admin's edit loaded to runtime, not saved)."""
        conn = self.conn()
        if runtime_values is None:
            runtime_values = {
                r["variable_name"]: r["variable_value"] for r in sqlite.rows(conn, "SELECT * FROM runtime_global_variables")
            }
        disk = self.disk_variables()
        try:
            overrides = {r["variable_name"]: r for r in sqlite.rows(conn, "SELECT * FROM variable_overrides")}
        except apsw.SQLError:  # a data directory no serve has initialised since the table was added
            overrides = {}
        origins = {}
        for name, decl in self.variables.items():
            value = runtime_values.get(name, decl.default)
            override = overrides.get(name)
            if override is not None and override["variable_value"] == value:
                origins[name] = override["origin"]
            elif value == decl.default and disk.get(name, decl.default) == decl.default:
                origins[name] = "default"
            elif disk.get(name) == value:
                origins[name] = "disk"
            else:
                origins[name] = "memory"
        return origins

    def memory_variables(self) -> dict[str, str]:
        return {r["variable_name"]: r["variable_value"] for r in sqlite.rows(self.conn(), "SELECT * FROM main.global_variables")}

    def disk_variables(self) -> dict[str, str]:
        return {r["variable_name"]: r["variable_value"] for r in sqlite.rows(self.conn(), "SELECT * FROM disk.global_variables")}

    # -- the cluster -----------------------------------------------------------------------
    def cluster_versions(self) -> dict[str, int]:
        """The version of each module this instance serves, as published in the cluster."""
        return cluster_layers.applied_versions(self.conn())

    def apply_cluster(self, fetched: ClusterModule, *, force: bool = False) -> bool:
        return cluster_layers.apply_module(self, fetched, force=force)

    # -- the runtime snapshot --------------------------------------------------------------
    def touch_runtime(self) -> int:
        """Bump the runtime version without changing it: every worker re-reads what it derives
        from the runtime, the certificate files included (SIGHUP). Returns the new version."""
        conn = self.conn()
        with sqlite.transaction(conn):
            conn.execute("UPDATE runtime_state SET version = version + 1, loaded_at = ? WHERE id = 1", (time.time(),))
            return int(sqlite.scalar(conn, "SELECT version FROM runtime_state WHERE id = 1"))

    def runtime_version(self) -> int:
        return int(sqlite.scalar(self.conn(), "SELECT version FROM runtime_state WHERE id = 1") or 0)

    def read_runtime(self) -> Runtime:
        conn = self.conn()
        with sqlite.transaction(conn, "DEFERRED"):
            version = int(sqlite.scalar(conn, "SELECT version FROM runtime_state WHERE id = 1") or 0)
            raw = {r["variable_name"]: r["variable_value"] for r in sqlite.rows(conn, "SELECT * FROM runtime_global_variables")}
            tables: dict[str, list[dict[str, Any]]] = {}
            for module in self.modules.values():
                if module is VARIABLES_MODULE:
                    continue
                for table in self.runtime_tables_of(module):
                    tables[table] = sqlite.rows(conn, f"SELECT * FROM main.{table}")
            origins = self.variable_origins(raw)
        return build_runtime(version, raw, tables, self.variables, origins=origins)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def add_missing_columns(conn: apsw.Connection, ddl: str) -> list[str]:
    """Migrate a data directory made by an older version forward: add the columns `ddl`
    declares that its tables lack, with their declared type and default. Admin tables only
    ever gain columns; values are validated at LOAD, as for any edit. Returns "table.column"s."""
    declared = apsw.Connection(":memory:")
    for statement in sqlite.iter_statements(ddl):
        declared.execute(statement)
    added = []
    for (table,) in declared.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        present = {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')}
        for _, column, kind, not_null, default, _ in declared.execute(f'PRAGMA table_info("{table}")').fetchall():
            if column in present:
                continue
            clause = f'ALTER TABLE "{table}" ADD COLUMN "{column}" {kind}'
            if default is not None:  # as written in schema.sql: a literal
                clause += f" {'NOT NULL ' if not_null else ''}DEFAULT {default}"
            conn.execute(clause)
            added.append(f"{table}.{column}")
    declared.close()
    if added:
        log.info("configuration tables migrated: added %s", ", ".join(added))
    return added
