"""What agents learn about a target, kept in catalog.db beside the catalog (agent.* / llm.*).

ProxySQL's second discovery phase: the agent's model runs in the client; the gateway keeps
its runs, events and conclusions per target and discovery run. Everything written here is
also put in llm_fts (kind, ref_id, title, body) in the same transaction, which is what
llm.search ranks with bm25. Unknown ids are INVALID_ARGUMENT, as the issue asks: the caller
passed an id that this store never issued.
"""

from __future__ import annotations

import json
import time
from typing import Any

import apsw

from gateway import sqlite
from gateway.errors import InvalidArgument
from handlers.query.catalog.store import CatalogStore, fts_query, object_name

KINDS = ("summary", "relationship", "domain", "metric", "question_template", "note")


class AgentMemory:
    def __init__(self, store: CatalogStore) -> None:
        self.store = store

    # -- ids ---------------------------------------------------------------------------------
    def agent_run(self, agent_run_id: int) -> dict[str, Any]:
        found = self.store.rows("SELECT * FROM agent_runs WHERE agent_run_id = ?", (agent_run_id,))
        if not found:
            raise InvalidArgument(f"unknown agent_run_id {agent_run_id}: agent.run_start issues them")
        return found[0]

    def open_agent_run(self, agent_run_id: int) -> dict[str, Any]:
        run = self.agent_run(agent_run_id)
        if run["status"] != "running":
            raise InvalidArgument(f"agent run {agent_run_id} is finished ({run['status']}); start a new one")
        return run

    def discovery_run(self, run_id: int, target_id: str | None = None) -> dict[str, Any]:
        found = self.store.rows("SELECT run_id, target_id FROM catalog_runs WHERE run_id = ?", (run_id,))
        if not found:
            raise InvalidArgument(f"unknown run_id {run_id}: discovery.run_static issues them")
        if target_id is not None and found[0]["target_id"] != target_id:
            raise InvalidArgument(f"run {run_id} belongs to target {found[0]['target_id']}, not {target_id}")
        return found[0]

    def _index(self, conn: apsw.Connection, kind: str, ref_id: int, target_id: str, title: str, body: str) -> None:
        conn.execute("DELETE FROM llm_fts WHERE kind = ? AND ref_id = ?", (kind, ref_id))
        conn.execute(
            "INSERT INTO llm_fts (kind, ref_id, target_id, title, body) VALUES (?,?,?,?,?)",
            (kind, ref_id, target_id, title, body),
        )

    # -- runs and events ---------------------------------------------------------------------
    def run_start(self, target_id: str, run_id: int, model: str, notes: str) -> int:
        self.discovery_run(run_id, target_id)
        with self.store.write() as conn:
            conn.execute(
                "INSERT INTO agent_runs (target_id, run_id, model, notes, started_at) VALUES (?,?,?,?,?)",
                (target_id, run_id, model, notes, time.time()),
            )
            return int(conn.last_insert_rowid())

    def run_finish(self, agent_run_id: int, status: str, error: str) -> dict[str, Any]:
        self.open_agent_run(agent_run_id)
        with self.store.write() as conn:
            conn.execute(
                "UPDATE agent_runs SET status = ?, error = ?, finished_at = ? WHERE agent_run_id = ?",
                (status, error, time.time(), agent_run_id),
            )
        return self.agent_run(agent_run_id)

    def event_append(self, agent_run_id: int, event_type: str, payload: Any) -> int:
        self.open_agent_run(agent_run_id)
        with self.store.write() as conn:
            conn.execute(
                "INSERT INTO agent_events (agent_run_id, event_type, payload_json, created_at) VALUES (?,?,?,?)",
                (agent_run_id, event_type, json.dumps(payload), time.time()),
            )
            return int(conn.last_insert_rowid())

    def events(self, agent_run_id: int, limit: int) -> list[dict[str, Any]]:
        found = self.store.rows(
            "SELECT event_id, event_type, payload_json, created_at FROM agent_events WHERE agent_run_id = ? ORDER BY event_id LIMIT ?",
            (agent_run_id, limit),
        )
        return [{**{k: v for k, v in r.items() if k != "payload_json"}, "payload": json.loads(r["payload_json"])} for r in found]

    # -- conclusions -------------------------------------------------------------------------
    def summary_upsert(
        self,
        agent_run_id: int,
        run_id: int,
        object_id: int,
        summary: str,
        confidence: float | None,
        status: str,
        sources: list[str],
    ) -> int:
        agent = self.open_agent_run(agent_run_id)
        self.discovery_run(run_id, agent["target_id"])
        obj = self.store.get(object_id)
        if obj is None or obj["target_id"] != agent["target_id"]:
            raise InvalidArgument(f"unknown object_id {object_id} for target {agent['target_id']}")
        name = object_name(obj)
        with self.store.write() as conn:
            conn.execute(
                "INSERT INTO llm_summaries (target_id, run_id, agent_run_id, object_id, object_name, summary, confidence, status, "
                "sources_json, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO UPDATE SET agent_run_id = excluded.agent_run_id, "
                "summary = excluded.summary, confidence = excluded.confidence, status = excluded.status, "
                "sources_json = excluded.sources_json, updated_at = excluded.updated_at",
                (
                    agent["target_id"],
                    run_id,
                    agent_run_id,
                    object_id,
                    name,
                    summary,
                    confidence,
                    status,
                    json.dumps(sources),
                    time.time(),
                ),
            )
            summary_id = int(
                sqlite.scalar(conn, "SELECT summary_id FROM llm_summaries WHERE target_id = ? AND run_id = ? AND object_id = ?",
                              (agent["target_id"], run_id, object_id))
            )  # fmt: skip
            self._index(conn, "summary", summary_id, agent["target_id"], name, summary)
        return summary_id

    def summaries(
        self, target_id: str, *, object_id: int | None = None, name: str | None = None, run_id: int | None = None
    ) -> list[dict[str, Any]]:
        clauses, params = ["target_id = ?"], [target_id]
        if object_id is not None:
            clauses.append("object_id = ?")
            params.append(object_id)
        if name is not None:
            clauses.append("object_name = ?")
            params.append(name)
        if run_id is not None:
            clauses.append("run_id = ?")
            params.append(run_id)
        found = self.store.rows(
            f"SELECT * FROM llm_summaries WHERE {' AND '.join(clauses)} ORDER BY run_id DESC, summary_id DESC", params
        )
        return [{**{k: v for k, v in r.items() if k != "sources_json"}, "sources": json.loads(r["sources_json"])} for r in found]

    def relationship_upsert(self, agent_run_id: int, relationship: dict[str, Any]) -> int:
        agent = self.open_agent_run(agent_run_id)
        r = relationship
        with self.store.write() as conn:
            rel_id = self.store._relationship(
                conn, agent["target_id"], agent["run_id"], "agent", r["from_schema"], r["from_table"], r["from_columns"],
                r["to_schema"], r["to_table"], r["to_columns"], confidence=r["confidence"], evidence=r["evidence"],
                agent_run_id=agent_run_id, now=time.time(),
            )  # fmt: skip
            title = f"{r['from_schema']}.{r['from_table']}({', '.join(r['from_columns'])}) -> {r['to_schema']}.{r['to_table']}({', '.join(r['to_columns'])})"
            self._index(conn, "relationship", rel_id, agent["target_id"], title, json.dumps(r["evidence"]))
        return rel_id

    def domain_upsert(self, agent_run_id: int, name: str, description: str, confidence: float | None) -> int:
        agent = self.open_agent_run(agent_run_id)
        with self.store.write() as conn:
            conn.execute(
                "INSERT INTO llm_domains (target_id, run_id, agent_run_id, name, description, confidence, updated_at) VALUES (?,?,?,?,?,?,?) "
                "ON CONFLICT DO UPDATE SET run_id = excluded.run_id, agent_run_id = excluded.agent_run_id, "
                "description = excluded.description, confidence = excluded.confidence, updated_at = excluded.updated_at",
                (agent["target_id"], agent["run_id"], agent_run_id, name, description, confidence, time.time()),
            )
            domain_id = int(
                sqlite.scalar(
                    conn, "SELECT domain_id FROM llm_domains WHERE target_id = ? AND name = ?", (agent["target_id"], name)
                )
            )
            self._index(
                conn, "domain", domain_id, agent["target_id"], name, description + " " + self._members_text(conn, domain_id)
            )
        return domain_id

    @staticmethod
    def _members_text(conn: apsw.Connection, domain_id: int) -> str:
        return " ".join(
            f"{s}.{t}"
            for s, t in conn.execute("SELECT schema_name, table_name FROM llm_domain_members WHERE domain_id = ?", (domain_id,))
        )

    def domain_set_members(self, agent_run_id: int, domain_id: int, members: list[dict[str, str]]) -> int:
        agent = self.open_agent_run(agent_run_id)
        found = self.store.rows(
            "SELECT * FROM llm_domains WHERE domain_id = ? AND target_id = ?", (domain_id, agent["target_id"])
        )
        if not found:
            raise InvalidArgument(f"unknown domain_id {domain_id} for target {agent['target_id']}: llm.domain_upsert issues them")
        with self.store.write() as conn:
            conn.execute("DELETE FROM llm_domain_members WHERE domain_id = ?", (domain_id,))
            for m in members:
                conn.execute(
                    "INSERT OR REPLACE INTO llm_domain_members (domain_id, schema_name, table_name, role) VALUES (?,?,?,?)",
                    (domain_id, m["schema"], m["table"], m.get("role") or ""),
                )
            self._index(
                conn,
                "domain",
                domain_id,
                agent["target_id"],
                found[0]["name"],
                found[0]["description"] + " " + self._members_text(conn, domain_id),
            )
        return len(members)

    def domains(self, target_id: str) -> list[dict[str, Any]]:
        found = self.store.rows("SELECT * FROM llm_domains WHERE target_id = ? ORDER BY name", (target_id,))
        for d in found:
            d["members"] = self.store.rows(
                "SELECT schema_name, table_name, role FROM llm_domain_members WHERE domain_id = ? ORDER BY 1, 2",
                (d["domain_id"],),
            )
        return found

    def metric_upsert(self, agent_run_id: int, name: str, description: str, sql: str, unit: str) -> int:
        agent = self.open_agent_run(agent_run_id)
        with self.store.write() as conn:
            conn.execute(
                "INSERT INTO llm_metrics (target_id, run_id, agent_run_id, name, description, sql, unit, updated_at) VALUES (?,?,?,?,?,?,?,?) "
                "ON CONFLICT DO UPDATE SET run_id = excluded.run_id, agent_run_id = excluded.agent_run_id, description = excluded.description, "
                "sql = excluded.sql, unit = excluded.unit, updated_at = excluded.updated_at",
                (agent["target_id"], agent["run_id"], agent_run_id, name, description, sql, unit, time.time()),
            )
            metric_id = int(
                sqlite.scalar(
                    conn, "SELECT metric_id FROM llm_metrics WHERE target_id = ? AND name = ?", (agent["target_id"], name)
                )
            )
            self._index(conn, "metric", metric_id, agent["target_id"], name, f"{description} {sql}")
        return metric_id

    def question_template_add(self, agent_run_id: int, question: str, sql_template: str, parameters: list[str]) -> int:
        agent = self.open_agent_run(agent_run_id)
        with self.store.write() as conn:
            conn.execute(
                "INSERT INTO llm_question_templates (target_id, run_id, agent_run_id, question, sql_template, parameters_json, created_at) "
                "VALUES (?,?,?,?,?,?,?)",
                (agent["target_id"], agent["run_id"], agent_run_id, question, sql_template, json.dumps(parameters), time.time()),
            )
            template_id = int(conn.last_insert_rowid())
            self._index(conn, "question_template", template_id, agent["target_id"], question, sql_template)
        return template_id

    def question_templates(self, limit: int) -> list[dict[str, Any]]:
        """The newest recorded question templates (MCP prompts of /mcp/query)."""
        return self.store.rows(
            "SELECT template_id, target_id, question, sql_template, parameters_json FROM llm_question_templates "
            "ORDER BY template_id DESC LIMIT ?",
            (limit,),
        )

    def note_add(
        self, target_id: str, run_id: int, agent_run_id: int | None, object_id: int | None, title: str, body: str, tags: str
    ) -> int:
        if agent_run_id is not None:
            agent = self.agent_run(agent_run_id)
            if agent["target_id"] != target_id:
                raise InvalidArgument(f"agent run {agent_run_id} belongs to target {agent['target_id']}, not {target_id}")
        self.discovery_run(run_id, target_id)
        if object_id is not None and (self.store.get(object_id) or {}).get("target_id") != target_id:
            raise InvalidArgument(f"unknown object_id {object_id} for target {target_id}")
        with self.store.write() as conn:
            conn.execute(
                "INSERT INTO llm_notes (target_id, run_id, agent_run_id, object_id, title, body, tags, created_at) VALUES (?,?,?,?,?,?,?,?)",
                (target_id, run_id, agent_run_id, object_id, title, body, tags, time.time()),
            )
            note_id = int(conn.last_insert_rowid())
            self._index(conn, "note", note_id, target_id, title, f"{body} {tags}")
        return note_id

    # -- search ------------------------------------------------------------------------------
    def search(self, query: str, target_id: str, kinds: list[str], limit: int) -> list[dict[str, Any]]:
        kinds = kinds or list(KINDS)
        sql = (
            "SELECT kind, ref_id, title, snippet(llm_fts, 4, '[', ']', ' … ', 12) AS snippet, bm25(llm_fts, 0, 0, 0, 3.0, 1.0) AS score "
            f"FROM llm_fts WHERE llm_fts MATCH ? AND target_id = ? AND kind IN ({', '.join('?' for _ in kinds)}) ORDER BY score LIMIT ?"
        )
        for any_word in (False, True):
            match = fts_query(query, any_word=any_word)
            if not match:
                return []
            found = self.store.rows(sql, (match, target_id, *kinds, limit))
            if found:
                return [
                    {**r, "ref_id": int(r["ref_id"]), "score": round(-r["score"], 4), **self._origin(r["kind"], int(r["ref_id"]))}
                    for r in found
                ]
        return []

    def _origin(self, kind: str, ref_id: int) -> dict[str, Any]:
        """Which discovery run and agent run wrote a hit."""
        table, key = {
            "summary": ("llm_summaries", "summary_id"), "relationship": ("catalog_relationships", "relationship_id"),
            "domain": ("llm_domains", "domain_id"), "metric": ("llm_metrics", "metric_id"),
            "question_template": ("llm_question_templates", "template_id"), "note": ("llm_notes", "note_id"),
        }[kind]  # fmt: skip
        found = self.store.rows(f"SELECT run_id, agent_run_id FROM {table} WHERE {key} = ?", (ref_id,))
        return found[0] if found else {"run_id": None, "agent_run_id": None}
