"""The discovery catalog: catalog.db in the data directory (DDL: schema.sql, section catalog).

One apsw connection per process, used under one lock: every tool call is a few indexed
statements, and a discovery run writes in batches of BATCH_TABLES tables per transaction, so
readers wait at most one batch. Several worker processes share the file through WAL.

    runs            catalog_runs: one row per discovery run, with progress and counts
    objects         catalog_objects: schemas, tables, views, columns (per run; run 0 = upserted)
    relationships   catalog_relationships: declared keys, view dependencies, agents' joins
    search          catalog_fts (FTS5, bm25) over names, comments, notes and tags
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import apsw

from gateway import sqlite
from gateway.pids import pid_alive

BATCH_TABLES = 200
OBJECT_COLUMNS = (
    "object_id, target_id, run_id, object_type, schema_name, table_name, column_name, comment, notes, tags, "
    "rows_estimate, definition_json, source, updated_at"
)
TABLE_TYPES = ("table", "view", "materialized_view", "foreign_table", "virtual_table", "sequence")


def fts_query(text: str, *, any_word: bool = False) -> str:
    """The caller's words as quoted FTS5 terms (no operators of theirs reach FTS5)."""
    words = re.findall(r"\w+", text)
    return (" OR " if any_word else " ").join(f'"{w}"' for w in words)


def object_name(row: dict[str, Any]) -> str:
    return ".".join(p for p in (row["schema_name"], row["table_name"], row["column_name"]) if p)


def decode_object(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in row.items() if k != "definition_json"}
    out["name"] = object_name(row)
    out["definition"] = json.loads(row["definition_json"] or "{}")
    out["tags"] = row["tags"].split() if row["tags"] else []
    return out


class CatalogStore:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite.connect(self.path)
        self.lock = threading.RLock()
        with self.lock, sqlite.transaction(self.conn):
            for statement in sqlite.iter_statements(sqlite.schema_section("catalog")):
                self.conn.execute(statement)

    def close(self) -> None:
        with self.lock:
            self.conn.close()

    def rows(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        with self.lock:
            return sqlite.rows(self.conn, sql, params)

    def write(self) -> Any:
        """`with store.write():` one IMMEDIATE transaction under the process lock."""
        return _Write(self)

    # -- runs --------------------------------------------------------------------------------
    def create_run(self, target_id: str, protocol: str, schema_filter: str, notes: str) -> int:
        with self.write():
            self.conn.execute(
                "INSERT INTO catalog_runs (target_id, protocol, schema_filter, notes, state, pid, created_at) VALUES (?,?,?,?,?,?,?)",
                (target_id, protocol, schema_filter, notes, "queued", os.getpid(), time.time()),
            )
            return int(self.conn.last_insert_rowid())

    def update_run(self, run_id: int, conn: apsw.Connection | None = None, **fields: Any) -> None:
        encoded = {
            k + "_json" if k in ("progress", "counts", "error") else k: (
                json.dumps(v) if k in ("progress", "counts", "error") else v
            )
            for k, v in fields.items()
        }
        assignments = ", ".join(f"{k} = ?" for k in encoded)
        sql = f"UPDATE catalog_runs SET {assignments} WHERE run_id = ?"
        if conn is not None:
            conn.execute(sql, (*encoded.values(), run_id))
            return
        with self.write():
            self.conn.execute(sql, (*encoded.values(), run_id))

    def run(self, run_id: int) -> dict[str, Any] | None:
        found = self.rows("SELECT * FROM catalog_runs WHERE run_id = ?", (run_id,))
        return run_status(found[0]) if found else None

    def runs(self, target_id: str | None, limit: int) -> list[dict[str, Any]]:
        if target_id:
            found = self.rows("SELECT * FROM catalog_runs WHERE target_id = ? ORDER BY run_id DESC LIMIT ?", (target_id, limit))
        else:
            found = self.rows("SELECT * FROM catalog_runs ORDER BY run_id DESC LIMIT ?", (limit,))
        return [run_status(r) for r in found]

    def latest_run(self, target_id: str) -> int | None:
        found = self.rows("SELECT max(run_id) AS run_id FROM catalog_runs WHERE target_id = ? AND state = 'ok'", (target_id,))
        return found[0]["run_id"] if found and found[0]["run_id"] is not None else None

    @staticmethod
    def _relationship(
        conn: apsw.Connection, target_id: str, run_id: int, kind: str, from_schema: str, from_table: str, from_columns: list[str],
        to_schema: str, to_table: str, to_columns: list[str], *, name: str = "", confidence: float = 1.0,
        evidence: dict[str, Any] | None = None, agent_run_id: int | None = None, now: float,
    ) -> int:  # fmt: skip
        conn.execute(
            "INSERT INTO catalog_relationships (target_id, run_id, agent_run_id, kind, from_schema, from_table, from_columns, "
            "to_schema, to_table, to_columns, confidence, evidence_json, name, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT DO UPDATE SET confidence = excluded.confidence, evidence_json = excluded.evidence_json, "
            "agent_run_id = excluded.agent_run_id, name = excluded.name, updated_at = excluded.updated_at",
            (target_id, run_id, agent_run_id, kind, from_schema, from_table, json.dumps(from_columns), to_schema, to_table,
             json.dumps(to_columns), confidence, json.dumps(evidence or {}), name, now),
        )  # fmt: skip
        return int(
            sqlite.scalar(
                conn,
                "SELECT relationship_id FROM catalog_relationships WHERE target_id = ? AND run_id = ? AND kind = ? AND from_schema = ? "
                "AND from_table = ? AND from_columns = ? AND to_schema = ? AND to_table = ? AND to_columns = ?",
                (
                    target_id,
                    run_id,
                    kind,
                    from_schema,
                    from_table,
                    json.dumps(from_columns),
                    to_schema,
                    to_table,
                    json.dumps(to_columns),
                ),
            )
        )

    # -- objects -----------------------------------------------------------------------------
    def get(self, object_id: int) -> dict[str, Any] | None:
        found = self.rows(f"SELECT {OBJECT_COLUMNS} FROM catalog_objects WHERE object_id = ?", (object_id,))
        return decode_object(found[0]) if found else None

    def find(self, target_id: str, run_id: int | None, schema: str, table: str, column: str = "") -> dict[str, Any] | None:
        """The object by name, in run_id or else the newest run that has it."""
        sql = (
            f"SELECT {OBJECT_COLUMNS} FROM catalog_objects WHERE target_id = ? AND schema_name = ? AND table_name = ? "
            "AND column_name = ? AND object_type <> 'schema'"
        )
        params: list[Any] = [target_id, schema, table, column]
        if not table:
            sql = sql.replace("AND object_type <> 'schema'", "AND object_type = 'schema'")
        if run_id is not None:
            sql += " AND run_id = ?"
            params.append(run_id)
        found = self.rows(sql + " ORDER BY run_id DESC LIMIT 1", params)
        return decode_object(found[0]) if found else None

    def columns_of(self, table: dict[str, Any]) -> list[dict[str, Any]]:
        found = self.rows(
            f"SELECT {OBJECT_COLUMNS} FROM catalog_objects WHERE target_id = ? AND run_id = ? AND schema_name = ? AND table_name = ? "
            "AND object_type = 'column' ORDER BY object_id",
            (table["target_id"], table["run_id"], table["schema_name"], table["table_name"]),
        )
        return [decode_object(r) for r in found]

    def _filters(
        self, target_id: str | None, run_id: int | None, object_type: str | None, schema_name: str | None
    ) -> tuple[str, list[Any]]:
        clauses, params = [], []
        for column, value in (
            ("target_id", target_id),
            ("run_id", run_id),
            ("object_type", object_type),
            ("schema_name", schema_name),
        ):
            if value is not None:
                clauses.append(f"o.{column} = ?")
                params.append(value)
        return (" AND ".join(clauses) or "1"), params

    def list(
        self, target_id: str, run_id: int | None, object_type: str | None, schema_name: str | None, after_id: int, limit: int
    ) -> list[dict[str, Any]]:
        where, params = self._filters(target_id, run_id, object_type, schema_name)
        found = self.rows(
            f"SELECT {OBJECT_COLUMNS} FROM catalog_objects o WHERE {where} AND o.object_id > ? ORDER BY o.object_id LIMIT ?",
            (*params, after_id, limit),
        )
        return [decode_object(r) for r in found]

    def summary(
        self, target_id: str, run_id: int | None, object_type: str | None, schema_name: str | None, biggest: int
    ) -> dict[str, Any]:
        where, params = self._filters(target_id, run_id, object_type, schema_name)
        counts = self.rows(
            f"SELECT schema_name, object_type, count(*) AS n FROM catalog_objects o WHERE {where} GROUP BY 1, 2 ORDER BY 1, 2",
            params,
        )
        tables = self.rows(
            f"SELECT schema_name, table_name, object_type, rows_estimate FROM catalog_objects o WHERE {where} "
            f"AND object_type IN ({', '.join('?' for _ in TABLE_TYPES)}) ORDER BY coalesce(rows_estimate, -1) DESC, table_name LIMIT ?",
            (*params, *TABLE_TYPES, biggest),
        )
        per_schema: dict[str, dict[str, int]] = {}
        for r in counts:
            per_schema.setdefault(r["schema_name"], {})[r["object_type"]] = r["n"]
        return {"total": sum(r["n"] for r in counts), "per_schema": per_schema, "biggest_tables": tables}

    def search(
        self, query: str, target_id: str | None, run_id: int | None, object_type: str | None, schema_name: str | None, limit: int
    ) -> list[dict[str, Any]]:
        where, params = self._filters(target_id, run_id, object_type, schema_name)
        sql = (
            f"SELECT {', '.join('o.' + c.strip() for c in OBJECT_COLUMNS.split(','))}, bm25(catalog_fts, 4.0, 2.0, 2.0, 1.0) AS score "
            f"FROM catalog_fts JOIN catalog_objects o ON o.object_id = catalog_fts.rowid WHERE catalog_fts MATCH ? AND {where} "
            "ORDER BY score, o.run_id DESC LIMIT ?"
        )
        for any_word in (False, True):
            match = fts_query(query, any_word=any_word)
            if not match:
                return []
            found = self.rows(sql, (match, *params, limit))
            if found:
                return [{**decode_object(r), "score": round(-r["score"], 4)} for r in found]
        return []

    def upsert(self, fields: dict[str, Any]) -> int:
        with self.write():
            if fields.get("object_id"):
                sets = {k: v for k, v in fields.items() if k in ("comment", "notes", "tags", "definition_json") and v is not None}
                sets["source"] = "upsert"
                sets["updated_at"] = time.time()
                self.conn.execute(
                    f"UPDATE catalog_objects SET {', '.join(f'{k} = ?' for k in sets)} WHERE object_id = ?",
                    (*sets.values(), fields["object_id"]),
                )
                return int(fields["object_id"])
            self.conn.execute(
                "INSERT INTO catalog_objects (target_id, run_id, object_type, schema_name, table_name, column_name, comment, notes, tags, "
                "definition_json, source, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,'upsert',?) ON CONFLICT DO UPDATE SET "
                "comment = coalesce(excluded.comment, comment), notes = excluded.notes, tags = excluded.tags, "
                "definition_json = excluded.definition_json, source = 'upsert', updated_at = excluded.updated_at",
                (fields["target_id"], fields["run_id"], fields["object_type"], fields["schema_name"], fields["table_name"],
                 fields["column_name"], fields["comment"] or "", fields["notes"] or "", fields["tags"] or "",
                 fields["definition_json"] or "{}", time.time()),
            )  # fmt: skip
            return int(
                sqlite.scalar(
                    self.conn,
                    "SELECT object_id FROM catalog_objects WHERE target_id = ? AND run_id = ? AND object_type = ? AND schema_name = ? "
                    "AND table_name = ? AND column_name = ?",
                    (
                        fields["target_id"],
                        fields["run_id"],
                        fields["object_type"],
                        fields["schema_name"],
                        fields["table_name"],
                        fields["column_name"],
                    ),
                )
            )

    def delete(self, object_id: int) -> int:
        with self.write():
            self.conn.execute("DELETE FROM catalog_objects WHERE object_id = ?", (object_id,))
            return self.conn.changes()

    def clear(self, target_id: str, run_id: int | None) -> dict[str, int]:
        with self.write():
            where, params = (
                ("target_id = ?", [target_id]) if run_id is None else ("target_id = ? AND run_id = ?", [target_id, run_id])
            )
            self.conn.execute(f"DELETE FROM catalog_objects WHERE {where}", params)
            objects = self.conn.changes()
            self.conn.execute(f"DELETE FROM catalog_relationships WHERE {where} AND kind <> 'agent'", params)
            relationships = self.conn.changes()
            self.conn.execute(f"DELETE FROM catalog_runs WHERE {where}", params)
            return {"objects": objects, "relationships": relationships, "runs": self.conn.changes()}

    # -- relationships -----------------------------------------------------------------------
    def relationships(
        self,
        target_id: str,
        *,
        run_id: int | None,
        schema: str | None = None,
        table: str | None = None,
        kinds: tuple[str, ...] = (),
    ) -> list[dict[str, Any]]:
        """Harvested ones of run_id (the newest run when None) and every agent-recorded one."""
        harvest_run = run_id if run_id is not None else self.latest_run(target_id)
        clauses = ["target_id = ?", "(kind = 'agent' OR run_id = ?)"]
        params: list[Any] = [target_id, harvest_run if harvest_run is not None else -1]
        if schema is not None:
            clauses.append("(from_schema = ? OR to_schema = ?)")
            params += [schema, schema]
        if table is not None:
            clauses.append("(from_table = ? OR to_table = ?)")
            params += [table, table]
        if kinds:
            clauses.append(f"kind IN ({', '.join('?' for _ in kinds)})")
            params += list(kinds)
        found = self.rows(
            f"SELECT * FROM catalog_relationships WHERE {' AND '.join(clauses)} ORDER BY kind, from_table, to_table, updated_at DESC",
            params,
        )
        for r in found:
            r["from_columns"], r["to_columns"] = json.loads(r["from_columns"]), json.loads(r["to_columns"])
            r["evidence"] = json.loads(r.pop("evidence_json") or "{}")
        return found


class _Write:
    def __init__(self, store: CatalogStore) -> None:
        self.store = store
        self.tx = sqlite.transaction(store.conn)

    def __enter__(self) -> apsw.Connection:
        self.store.lock.acquire()
        try:
            return self.tx.__enter__()
        except BaseException:
            self.store.lock.release()
            raise

    def __exit__(self, *exc: Any) -> None:
        try:
            self.tx.__exit__(*exc)
        finally:
            self.store.lock.release()


def run_status(row: dict[str, Any]) -> dict[str, Any]:
    state = row["state"]
    if state in ("queued", "running") and not pid_alive(int(row["pid"] or 0)):
        state = "interrupted"
    return {
        "run_id": row["run_id"],
        "target_id": row["target_id"],
        "state": state,
        "schema_filter": row["schema_filter"],
        "notes": row["notes"],
        "created_at": row["created_at"],
        "started_at": row["started_at"],
        "finished_at": row["finished_at"],
        "progress": json.loads(row["progress_json"] or "{}"),
        "counts": json.loads(row["counts_json"] or "{}"),
        "error": json.loads(row["error_json"] or "null"),
    }
