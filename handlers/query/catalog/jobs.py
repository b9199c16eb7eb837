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
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from backends.dialects import catalog_for
from backends.harvest import snapshot
from gateway.errors import GatewayError, NotFound
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
                catalog = catalog_for(target.protocol, conn)
                schemas = self._schemas(catalog, target, schema_filter)
                progress["schemas_total"] = len(schemas)
                report()
                for schema in schemas:
                    if self.stop.is_set():
                        raise GatewayError("the gateway shut down during the run")
                    progress.update(phase=f"reading {schema}")
                    report()
                    tables = list(snapshot(target.protocol, conn, schema).values())
                    progress["tables_total"] += len(tables)
                    progress.update(phase=f"writing {schema}")
                    with self.store.write() as db:
                        self.store.write_schema_object(run_id, target_id, schema, db)
                    counts["schemas"] += 1
                    for start in range(0, len(tables), BATCH_TABLES):
                        batch = tables[start : start + BATCH_TABLES]
                        with self.store.write() as db:
                            for key, value in self.store.write_tables(run_id, target_id, schema, batch, db).items():
                                counts[key] += value
                            progress["tables_done"] += len(batch)
                            report(db)
                    progress["schemas_done"] += 1
            progress["phase"] = "done"
            report()
            self.store.update_run(run_id, state="ok", finished_at=time.time())
        except GatewayError as exc:
            self._fail(run_id, progress, {"code": exc.code, "message": exc.message})
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
    def _schemas(catalog: Any, target: Any, schema_filter: str) -> list[str]:
        if not schema_filter and target.protocol == "mysql" and (target.database or target.default_schema):
            return [target.database or target.default_schema]
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
