"""discovery.run_static as a background job: harvest a target's schemas into the catalog.

A run is accepted at once (a numbered row in catalog_runs) and runs in this process's one
discovery thread; its progress (phase, schemas and tables done of total) is written to the
run's row with each batch of BATCH_TABLES tables, in the same transaction as the batch, so
discovery.status in any worker and `mcp-gateway query discover` read the same numbers. A run
whose process died is reported 'interrupted' (catalog.store.run_status).

Which schemas: schema_filter is a name or a pattern with * or % wildcards. Empty means every
schema the target's account can see, except on MySQL/MariaDB targets with a database set,
where it means that database (a server's other databases are usually not the target's).
"""

from __future__ import annotations

import fnmatch
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import apsw

from backends.engines import driver_errors, translate
from backends.engines.catalog import Table
from gateway.errors import DeadlineExceeded, GatewayError, NotFound
from handlers.query.catalog.store import BATCH_TABLES, CatalogStore

log = logging.getLogger("mcp_gateway.query.discovery")
SCHEMA_PAGE = 1000


def schema_matches(name: str, schema_filter: str) -> bool:
    if not schema_filter:
        return True
    pattern = schema_filter.replace("%", "*")
    return fnmatch.fnmatchcase(name, pattern) if "*" in pattern else name == schema_filter


class DiscoveryJobs:
    """One per process. `connection(target_id)` is the pools' context manager -> (target, conn)."""

    def __init__(self, store: CatalogStore, connection: Callable[[str], Any]) -> None:
        self.store = store
        self.connection = connection
        self.stop = threading.Event()
        self._runner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="query-discovery")
        self._done: dict[int, threading.Event] = {}

    def start(
        self, target: Any, schema_filter: str, notes: str, *, on_progress: Callable[[dict[str, Any]], None] | None = None
    ) -> int:
        run_id = self.store.create_run(target.target_id, target.protocol, schema_filter, notes)
        self._done[run_id] = threading.Event()
        self._runner.submit(self._run, run_id, target.target_id, schema_filter, on_progress)
        return run_id

    def wait(self, run_id: int, timeout_s: float) -> dict[str, Any]:
        event = self._done.get(run_id)
        if event is not None:
            event.wait(max(0.0, timeout_s))
        status = self.store.run(run_id)
        if status is None:
            raise NotFound(f"no discovery run {run_id}")
        return status

    def close(self) -> None:
        self.stop.set()
        self._runner.shutdown(wait=True, cancel_futures=True)

    # -- the job -----------------------------------------------------------------------------
    def _run(self, run_id: int, target_id: str, schema_filter: str, on_progress: Callable[[dict[str, Any]], None] | None) -> None:
        progress: dict[str, Any] = {
            "phase": "listing",
            "schemas_total": None,
            "schemas_done": 0,
            "tables_total": 0,
            "tables_done": 0,
        }
        counts: dict[str, int] = {
            "schemas": 0,
            "tables": 0,
            "views": 0,
            "columns": 0,
            "foreign_keys": 0,
            "indexes": 0,
            "view_dependencies": 0,
        }

        def report(conn: Any = None) -> None:
            self.store.update_run(run_id, conn, progress=progress, counts=counts)
            if on_progress is not None:
                on_progress(dict(progress))

        self.store.update_run(run_id, state="running", started_at=time.time())
        try:
            with self.connection(target_id) as (target, conn):
                catalog = target.engine.catalog(conn)
                schemas = self._schemas(catalog, target, schema_filter)
                progress["schemas_total"] = len(schemas)
                report()
                for schema in schemas:
                    progress.update(phase=f"listing {schema}")
                    report()
                    names = self._table_names(catalog, schema)
                    progress["tables_total"] += len(names)
                    progress.update(phase=f"harvesting {schema}")
                    with self.store.write() as db:
                        write_schema_object(run_id, target_id, schema, db)
                    counts["schemas"] += 1
                    for start in range(0, len(names), BATCH_TABLES):
                        if self.stop.is_set():
                            raise GatewayError("the gateway shut down during the run")
                        batch = list(target.engine.snapshot(conn, schema, names[start : start + BATCH_TABLES]).values())
                        with self.store.write() as db:
                            for key, value in write_tables(self.store, run_id, target_id, schema, batch, db).items():
                                counts[key] += value
                            progress["tables_done"] += len(batch)
                            report(db)
                    progress["schemas_done"] += 1
            progress["phase"] = "done"
            report()
            self.store.update_run(run_id, state="ok", finished_at=time.time())
        except GatewayError as exc:
            self._fail(run_id, progress, {"code": exc.code, "message": exc.message})
        except driver_errors() as exc:
            if not isinstance(translate(exc), DeadlineExceeded):
                raise
            message = f"a catalog statement ran past the timeout_ms of target {target_id}; try a narrower schema_filter"
            self._fail(run_id, progress, {"code": "DEADLINE_EXCEEDED", "message": message})
        except Exception:  # a driver error or a bug: a safe message here, the trace in the log
            log.exception("discovery run %s on target %s failed", run_id, target_id)
            self._fail(run_id, progress, {"code": "INTERNAL", "message": "the discovery run failed; see the gateway log"})
        finally:
            event = self._done.pop(run_id, None)
            if event is not None:
                event.set()

    def _fail(self, run_id: int, progress: dict[str, Any], error: dict[str, Any]) -> None:
        progress["phase"] = "failed"
        self.store.update_run(run_id, state="failed", finished_at=time.time(), progress=progress, error=error)

    @staticmethod
    def _table_names(catalog: Any, schema: str) -> list[str]:
        names: list[str] = []
        after = ""
        while True:
            page = [t["name"] for t in catalog.tables(schema, after, SCHEMA_PAGE, None)]
            names += page
            if len(page) < SCHEMA_PAGE:
                return names
            after = page[-1]

    @staticmethod
    def _schemas(catalog: Any, target: Any, schema_filter: str) -> list[str]:
        if not schema_filter and target.engine.database_is_schema and (own := target.engine.default_schema(target)):
            return [own]  # the one database the target names, not every database the account sees
        names: list[str] = []
        after = ""
        while True:
            page = catalog.schemas(after, SCHEMA_PAGE)
            names += [n for n in page if schema_matches(n, schema_filter)]
            if len(page) < SCHEMA_PAGE:
                break
            after = page[-1]
        if not names:
            raise NotFound(f"no schema of target {target.target_id} matches {schema_filter!r}")
        return names


# -- writing a harvest (inside the caller's transaction) ---------------------------------------


def write_tables(
    store: CatalogStore, run_id: int, target_id: str, schema: str, tables: list[Table], conn: apsw.Connection
) -> dict[str, int]:
    """Inside the caller's transaction: the tables, their columns, keys and view dependencies."""
    now = time.time()
    counts = {"tables": 0, "views": 0, "columns": 0, "foreign_keys": 0, "indexes": 0, "view_dependencies": 0}
    insert = (
        "INSERT INTO catalog_objects (target_id, run_id, object_type, schema_name, table_name, column_name, comment, "
        "rows_estimate, definition_json, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)"
    )
    for table in tables:
        counts["tables" if table["type"] != "view" else "views"] += 1
        definition = {
            k: table[k] for k in ("type", "primary_key", "unique", "foreign_keys", "indexes", "depends_on", "definition")
        }
        definition["columns"] = [{"name": c["name"], "type": c["type"]} for c in table["columns"]]
        conn.execute(
            insert,
            (target_id, run_id, table["type"], schema, table["name"], "", table["comment"] or "", table["rows_estimate"],
             json.dumps(definition), now),
        )  # fmt: skip
        keys = {c for k in [table["primary_key"], *table["unique"]] for c in k[:1]}
        for position, column in enumerate(table["columns"], 1):
            column_def = {
                "type": column["type"], "nullable": column["nullable"], "default": column["default"],
                "ordinal": position, "key": column["name"] in keys,
            }  # fmt: skip
            conn.execute(
                insert,
                (target_id, run_id, "column", schema, table["name"], column["name"], column["comment"] or "", None,
                 json.dumps(column_def), now),
            )  # fmt: skip
        counts["columns"] += len(table["columns"])
        counts["indexes"] += len(table["indexes"])
        for fk in table["foreign_keys"]:
            counts["foreign_keys"] += 1
            store._relationship(conn, target_id, run_id, "declared_fk", schema, table["name"], fk["columns"],
                               fk["referenced_schema"] or schema, fk["referenced_table"], fk["referenced_columns"],
                               name=fk["name"] or "", now=now)  # fmt: skip
        for dep_schema, dep_table in table["depends_on"]:
            counts["view_dependencies"] += 1
            store._relationship(
                conn, target_id, run_id, "view_dependency", schema, table["name"], [], dep_schema, dep_table, [], now=now
            )
    return counts


def write_schema_object(run_id: int, target_id: str, schema: str, conn: apsw.Connection) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO catalog_objects (target_id, run_id, object_type, schema_name, updated_at) VALUES (?,?,?,?,?)",
        (target_id, run_id, "schema", schema, time.time()),
    )
