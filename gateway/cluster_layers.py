"""How a module's rows move between an instance's config.db and the cluster (gateway/cluster.py).

The store calls these from its verbs when a cluster is attached:

    LOAD <m> TO RUNTIME   publish_load: the rows it validated become the cluster's next version
    SAVE <m> TO DISK      the memory rows become the cluster's disk layer of <m>
    LOAD <m> FROM DISK    the cluster's disk rows (when it has them) replace memory
    a newer version       apply_module: memory and runtime rows replaced, runtime_state bumped

Local variables (`Variable.local`: port, bind address, certificates, the cluster DSN) are cut
out of everything published and kept as they are by everything applied.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import apsw

from gateway import sqlite
from gateway.cluster import ClusterLink, ClusterModule, Rows


class ConfigModule(Protocol):
    name: str
    tables: tuple[str, ...]


class ConfigStore(Protocol):
    """What this module needs of gateway.store.ConfigStore (which imports this module)."""

    variables: Mapping[str, Any]
    modules: Mapping[str, Any]
    cluster: ClusterLink | None

    def conn(self) -> apsw.Connection: ...
    def runtime_tables_of(self, module: Any) -> tuple[str, ...]: ...
    def bump_runtime_version(self, conn: apsw.Connection) -> int: ...


VARIABLE_TABLES = ("global_variables", "runtime_global_variables")


def local_names(store: ConfigStore) -> frozenset[str]:
    return frozenset(name for name, decl in store.variables.items() if decl.local)


def shared(store: ConfigStore, rows_by_table: Mapping[str, list[dict[str, Any]]]) -> Rows:
    """The rows the cluster shares: all of them, except local variables."""
    keep_out = local_names(store)
    return {
        table: [r for r in rows if not (table in VARIABLE_TABLES and r["variable_name"] in keep_out)]
        for table, rows in rows_by_table.items()
    }


def replace_rows(
    store: ConfigStore, conn: apsw.Connection, schema: str, tables: Iterable[str], rows_by_table: Mapping[str, list[dict]]
) -> None:
    """Replace the shared rows of `tables` with the given ones (columns this version has only:
    an instance of another gateway version may publish a column more or less)."""
    keep = local_names(store)
    for table in tables:
        columns = [r["name"] for r in sqlite.rows(conn, f"PRAGMA {schema}.table_info({table})")]
        if table in VARIABLE_TABLES:
            marks = ",".join("?" * len(keep)) or "''"
            conn.execute(f"DELETE FROM {schema}.{table} WHERE variable_name NOT IN ({marks})", tuple(keep))
        else:
            conn.execute(f"DELETE FROM {schema}.{table}")
        for row in rows_by_table.get(table, []):
            if table in VARIABLE_TABLES and row.get("variable_name") in keep:
                continue
            present = [c for c in columns if c in row]
            conn.execute(
                f"INSERT OR REPLACE INTO {schema}.{table} ({', '.join(present)}) VALUES ({', '.join('?' * len(present))})",
                [row[c] for c in present],
            )


def applied_versions(conn: apsw.Connection) -> dict[str, int]:
    return {r["module"]: int(r["version"]) for r in sqlite.rows(conn, "SELECT module, version FROM main.cluster_applied")}


def record_applied(conn: apsw.Connection, module: str, version: int) -> None:
    conn.execute(
        "INSERT INTO main.cluster_applied (module, version) VALUES (?, ?) "
        "ON CONFLICT (module) DO UPDATE SET version = excluded.version",
        (module, version),
    )


def apply_module(store: ConfigStore, fetched: ClusterModule, *, force: bool = False) -> bool:
    """Serve a module version published by an instance: its memory and runtime rows replace this
    instance's (local variables kept), and the runtime version every worker polls moves on.
    False when this instance already serves that version (another of its workers got there first)."""
    module = store.modules.get(fetched.module)
    if module is None:  # published by a newer gateway with a module this one does not know
        return False
    conn = store.conn()
    with sqlite.transaction(conn):
        if not force and applied_versions(conn).get(module.name, 0) >= fetched.version:
            return False
        replace_rows(store, conn, "main", module.tables, fetched.memory)
        replace_rows(store, conn, "main", store.runtime_tables_of(module), fetched.runtime)
        record_applied(conn, module.name, fetched.version)
        store.bump_runtime_version(conn)
    return True


def module_rows(conn: apsw.Connection, schema: str, tables: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    return {t: sqlite.rows(conn, f"SELECT * FROM {schema}.{t}") for t in tables}


def save_disk(store: ConfigStore, module: ConfigModule) -> None:
    assert store.cluster is not None
    store.cluster.save_disk(module.name, shared(store, module_rows(store.conn(), "main", module.tables)))


def load_disk(store: ConfigStore, module: ConfigModule) -> bool:
    """The cluster's disk rows of `module` into memory; False when the cluster has none saved."""
    assert store.cluster is not None
    rows = store.cluster.load_disk(module.name)
    if rows is None:
        return False
    conn = store.conn()
    with sqlite.transaction(conn):
        replace_rows(store, conn, "main", module.tables, rows)
    return True
