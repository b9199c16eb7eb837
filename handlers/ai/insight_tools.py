"""The evidence-backed tools of /mcp/ai: anomaly.detect, anomaly.list, recommendation.get (a tool
group of AiHandler). No model: they read what the gateway recorded (gateway.evidence: traffic per tool
and outcome, digest timings, refused statements, failed authentications) and the query digest
statistics, and judge them with the pure rules of anomaly/detect.py and recommend/.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from pydantic import Field

from backends.sql import Statement
from gateway import sqlite
from gateway.errors import GatewayError, Unavailable
from gateway.evidence import EvidenceRecorder
from gateway.store import ConfigStore
from gateway.tools import CallContext, ToolInput, ToolOutput, tool
from handlers.ai.anomaly.detect import DigestBucket, Event, Evidence, TrafficBucket, detect
from handlers.ai.recommend import advice
from handlers.ai.recommend.plans import IndexSuggestion, suggest_index

if TYPE_CHECKING:
    from prometheus_client import Counter

    from backends.sql import ReadOnlySql
    from backends.targets import Target
    from gateway.metrics import Metrics

log = logging.getLogger("mcp_gateway.ai")

MIN_SLOW_CALLS = 5  # a digest needs this many calls before its plan is worth an EXPLAIN
MAX_EXPLAINED = 10  # slowest digests explained per recommendation.get
_NOT_WORKLOAD = ("explain_sql", "recommendation.get")  # their digests time EXPLAINs, not the statements


class AnomalyOut(ToolOutput):
    id: int
    kind: str = Field(
        description="request_rate_spike, error_rate_spike, sql_injection_attempts, refusal_burst, auth_failure_burst or latency_outlier."
    )
    severity: str = Field(description="low, medium or high.")
    subject: dict[str, str] = Field(description="What it is about: endpoint and tool, token_fingerprint, client or digest.")
    summary: str
    evidence: dict[str, Any] = Field(description="Counts, baselines and digests involved; never row data or secrets.")
    detected_at: float
    window_start: float
    window_end: float


class DetectIn(ToolInput):
    window_s: int | None = Field(
        default=None, ge=10, le=86_400, description="Seconds to judge, ending now; omitted: ai-anomaly_window_s."
    )


class DetectOut(ToolOutput):
    anomalies: list[AnomalyOut]
    new: int = Field(description="Anomalies not already stored from an earlier detection over the same window.")
    window_s: int
    baseline_s: int
    notes: list[str] = Field(description="What could not be judged, and why.")


class ListIn(ToolInput):
    since: float | None = Field(default=None, ge=0, le=1e11, description="Unix seconds; omitted: all kept anomalies.")
    kind: str | None = Field(default=None, max_length=64)
    limit: int = Field(default=100, ge=1, le=1000)


class ListOut(ToolOutput):
    anomalies: list[AnomalyOut]
    truncated: bool


class RecommendIn(ToolInput):
    target_id: str | None = Field(
        default=None, max_length=64, description="Only this target's recommendations (tool-level ones are kept)."
    )


class RecommendationOut(ToolOutput):
    kind: str = Field(description="missing_index, tool_errors, caps_hit, cache_candidate or privileged_target.")
    severity: str
    title: str
    evidence: dict[str, Any]
    action: str = Field(description="The exact statement or variable change to make.")
    target_id: str = ""


class RecommendOut(ToolOutput):
    recommendations: list[RecommendationOut]
    period_s: int = Field(description="How much evidence was read (mcp-evidence_retention_s).")
    notes: list[str]


def anomaly_counter(metrics: Metrics | None) -> Counter | None:
    """mcp_ai_anomalies_total, by kind and severity (None: no metrics, as in tests that build handlers)."""
    if metrics is None:
        return None
    return metrics.counter("mcp_ai_anomalies", "Anomalies anomaly.detect found, by kind and severity.", ["kind", "severity"])


class InsightTools:
    def __init__(
        self,
        store: ConfigStore,
        sql_path: ReadOnlySql | None,
        evidence: EvidenceRecorder | None,
        anomalies_found: Counter | None,
    ) -> None:
        self.store = store
        self.sql_path = sql_path  # EXPLAINs of slow digests; its pending statistics are flushed before reading them
        self.evidence = evidence  # what this worker recorded (None: it records none)
        self.anomalies_found = anomalies_found

    def _evidence(self) -> EvidenceRecorder:
        if self.evidence is None:
            raise Unavailable("this worker records no evidence")
        return self.evidence

    @tool("anomaly.detect", title="Detect anomalies in gateway traffic", read_only=False, idempotent=True)
    def anomaly_detect(self, args: DetectIn, ctx: CallContext) -> DetectOut:
        """Find unusual traffic in the last window_s seconds against the rolling baseline before it, and store what is found.

        Looks for request-rate and error-rate spikes per endpoint and tool, refused statements
        with SQL-injection signatures and bursts of refusals per token fingerprint, failed
        authentication bursts per client address, and latency outliers per query digest. No
        model is needed. Each anomaly has kind, severity, subject, a summary and its evidence
        (counts, baselines, digests — never row data or secrets); new ones are kept (see
        anomaly.list) and counted in mcp_ai_anomalies_total."""
        runtime = ctx.runtime
        window_s = args.window_s or runtime.var("ai-anomaly_window_s")
        baseline_s = runtime.var("ai-anomaly_baseline_s")
        now = time.time()
        evidence = self._evidence()
        seen = evidence.read(since=now - window_s - baseline_s)
        found, notes = detect(self._judge_input(seen), now=now, window_s=window_s, baseline_s=baseline_s)
        stored, new = self._store(found, now=now, window_s=window_s, keep=runtime.var("ai-anomalies_max"))
        return DetectOut(anomalies=stored, new=new, window_s=window_s, baseline_s=baseline_s, notes=notes)

    def _judge_input(self, seen: dict[str, list[dict[str, Any]]]) -> Evidence:
        per_tool: dict[tuple[int, str, str], list[int]] = {}
        for row in seen["traffic"]:
            agg = per_tool.setdefault((row["bucket"], row["endpoint"], row["tool"]), [0, 0])
            agg[0] += row["calls"]
            agg[1] += row["calls"] if row["outcome"] != "ok" else 0
        digests = [DigestBucket(r["bucket"], r["digest"], r["calls"], r["sum_us"], r["max_us"]) for r in seen["digests"]]
        return Evidence(
            buckets=[TrafficBucket(b, e, t, calls, errors) for (b, e, t), (calls, errors) in per_tool.items()],
            events=[Event(**{k: v for k, v in e.items() if k != "id"}) for e in seen["events"]],
            digests=digests,
            digest_texts=self._digest_texts({d.digest for d in digests}),
            traffic_since=seen["first"][0]["first"] if seen["first"] else None,
        )

    def _digest_texts(self, digests: set[str]) -> dict[str, str]:
        if not digests:
            return {}
        if self.sql_path is not None:
            self.sql_path.flush_stats()
        marks = ",".join("?" * len(digests))
        rows = sqlite.rows(
            self.store.conn(),
            f"SELECT DISTINCT digest, digest_text FROM stats_mcp_query_digest WHERE digest IN ({marks})",
            tuple(digests),
        )
        return {r["digest"]: r["digest_text"] for r in rows}

    def _store(self, found: list[Any], *, now: float, window_s: int, keep: int) -> tuple[list[AnomalyOut], int]:
        """Insert the anomalies not already stored for an overlapping window; bound the table."""
        conn = self.store.conn()
        out, new = [], 0
        with sqlite.transaction(conn):
            for anomaly in found:
                subject = json.dumps(anomaly.subject, sort_keys=True)
                earlier = sqlite.rows(
                    conn,
                    "SELECT id FROM ai_anomalies WHERE kind = ? AND subject = ? AND window_end > ? ORDER BY id DESC LIMIT 1",
                    (anomaly.kind, subject, now - window_s),
                )
                if earlier:
                    anomaly_id = earlier[0]["id"]
                    conn.execute(
                        "UPDATE ai_anomalies SET severity = ?, summary = ?, evidence = ?, window_end = ? WHERE id = ?",
                        (anomaly.severity, anomaly.summary, json.dumps(anomaly.evidence), now, anomaly_id),
                    )
                    detected_at = sqlite.scalar(conn, "SELECT detected_at FROM ai_anomalies WHERE id = ?", (anomaly_id,))
                else:
                    conn.execute(
                        "INSERT INTO ai_anomalies (detected_at, kind, severity, subject, summary, evidence, window_start, window_end)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (now, anomaly.kind, anomaly.severity, subject, anomaly.summary, json.dumps(anomaly.evidence), now - window_s, now),
                    )  # fmt: skip
                    anomaly_id, detected_at, new = conn.last_insert_rowid(), now, new + 1
                    if self.anomalies_found is not None:
                        self.anomalies_found.labels(anomaly.kind, anomaly.severity).inc()
                out.append(
                    AnomalyOut(
                        id=anomaly_id, kind=anomaly.kind, severity=anomaly.severity, subject=anomaly.subject,
                        summary=anomaly.summary, evidence=anomaly.evidence, detected_at=detected_at,
                        window_start=now - window_s, window_end=now,
                    )
                )  # fmt: skip
            conn.execute("DELETE FROM ai_anomalies WHERE id <= (SELECT MAX(id) FROM ai_anomalies) - ?", (keep,))
        return out, new

    @tool("anomaly.list", title="List detected anomalies", read_only=True)
    def anomaly_list(self, args: ListIn, ctx: CallContext) -> ListOut:
        """List the anomalies anomaly.detect stored, newest first, optionally since a time (unix seconds) and of one kind."""
        self._evidence().flush()  # creates the tables on a fresh data directory
        where, params = ["detected_at >= ?"], [args.since or 0.0]
        if args.kind:
            where.append("kind = ?")
            params.append(args.kind)
        rows = sqlite.rows(
            self.store.conn(),
            f"SELECT * FROM ai_anomalies WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?",
            (*params, args.limit + 1),
        )
        anomalies = [
            AnomalyOut(**{**r, "subject": json.loads(r["subject"]), "evidence": json.loads(r["evidence"])})
            for r in rows[: args.limit]
        ]
        return ListOut(anomalies=anomalies, truncated=len(rows) > args.limit)

    @tool("recommendation.get", title="Recommendations from measured evidence", read_only=True)
    def recommendation_get(self, args: RecommendIn, ctx: CallContext) -> RecommendOut:
        """Recommend changes from what the gateway measured: missing indexes, failing tools, caps often hit, cache candidates, over-privileged targets.

        Frequent slow query digests are EXPLAINed (through the read-only path) and a full table
        scan filtered by the statement's predicates yields the CREATE INDEX that would serve it;
        tools with high error ratios get their top error codes; tools whose answers are often cut
        (truncated) get the cap to raise; digests run often with an unchanged result become
        cache-rule candidates; targets whose account can write get a privilege warning. Each
        recommendation carries its evidence and the exact statement or variable to change."""
        evidence = self._evidence()
        period_s = ctx.runtime.var("mcp-evidence_retention_s")
        seen = evidence.read(since=time.time() - period_s)
        notes: list[str] = []
        outcomes: dict[tuple[str, str, str], dict[str, Any]] = {}
        for row in seen["traffic"]:
            agg = outcomes.setdefault(
                (row["endpoint"], row["tool"], row["outcome"]),
                {"endpoint": row["endpoint"], "tool": row["tool"], "outcome": row["outcome"], "calls": 0, "truncated": 0},
            )
            agg["calls"] += row["calls"]
            agg["truncated"] += row["truncated"]
        found = advice.tool_outcomes(list(outcomes.values()))
        digests = self._workload_digests(args.target_id)
        changes: dict[str, int] = {}
        for row in seen["digests"]:
            changes[row["digest"]] = changes.get(row["digest"], 0) + row["result_changes"]
        found += self._missing_indexes(ctx, digests, notes)
        found += advice.cache_candidates(digests, changes)
        targets = [
            {"target_id": r["target_id"], "privilege_warnings": json.loads(r.get("privilege_warnings") or "[]")}
            for r in ctx.runtime.table("runtime_mcp_target_profiles")
            if args.target_id in (None, r["target_id"])
        ]
        found += advice.privilege_warnings(targets)
        if args.target_id:
            found = [r for r in found if r.target_id in ("", args.target_id)]
        order = {"critical": 0, "warning": 1, "info": 2}
        found.sort(key=lambda r: order.get(r.severity, 3))
        return RecommendOut(recommendations=[RecommendationOut(**vars(r)) for r in found], period_s=period_s, notes=notes)

    def _workload_digests(self, target_id: str | None) -> list[dict[str, Any]]:
        """Query digests summed over the tools that ran them (EXPLAIN-only tools left out)."""
        if self.sql_path is not None:
            self.sql_path.flush_stats()
        marks = ",".join("?" * len(_NOT_WORKLOAD))
        where, params = f"tool_name NOT IN ({marks})", list(_NOT_WORKLOAD)
        if target_id:
            where += " AND target_id = ?"
            params.append(target_id)
        return sqlite.rows(
            self.store.conn(),
            "SELECT target_id, digest, MAX(digest_text) AS digest_text, SUM(count_star) AS count_star, SUM(sum_time) AS sum_time "
            f"FROM stats_mcp_query_digest WHERE {where} GROUP BY target_id, digest ORDER BY SUM(sum_time) DESC LIMIT 500",
            params,
        )

    def _missing_indexes(self, ctx: CallContext, digests: list[dict[str, Any]], notes: list[str]) -> list[advice.Recommendation]:
        """EXPLAIN the slowest frequent digests (their last statement) and name the index each full scan wants."""
        slow_us = ctx.runtime.var("ai-slow_query_ms") * 1000
        slow = [d for d in digests if d["count_star"] >= MIN_SLOW_CALLS and d["sum_time"] / d["count_star"] >= slow_us]
        out = []
        sql_path = self.sql_path
        for digest in slow[:MAX_EXPLAINED]:
            sample = self._evidence().sample(digest["digest"])
            if sample is None or sql_path is None:
                notes.append(f"digest {digest['digest']}: no recent statement recorded to EXPLAIN")
                continue
            try:
                target = sql_path.targets.resolve(sample["target_id"])
                if not target.allow_explain:
                    notes.append(f"digest {digest['digest']}: target {target.target_id} does not allow EXPLAIN")
                    continue
                statement = Statement(
                    sql=sample["sql_text"], target_id=target.target_id, schema=sample["schema_name"] or None,
                    tool_name="recommendation.get", explain="plan",
                )  # fmt: skip
                plan = target.engine.plan_of(sql_path.run(ctx, statement))
            except GatewayError as exc:
                notes.append(f"digest {digest['digest']}: EXPLAIN failed ({exc.code}: {exc.message})")
                continue
            scans = []
            engine = target.engine
            for scan in engine.full_scans(plan):
                index = suggest_index(sample["sql_text"], engine.dialect, scan, default_schema=sample["schema_name"])
                if index is not None and self._indexed_already(target, index):
                    notes.append(
                        f"digest {digest['digest']}: {index.table} has an index on ({', '.join(index.columns)}) "
                        "although its plan reads the table whole"
                    )
                elif index is not None:
                    scans.append(
                        {
                            "table": index.table,
                            "rows_estimate": scan.rows_estimate,
                            "index_statement": index.statement(engine.quote),
                        }
                    )
            if scans:
                out.append(advice.missing_index(digest, scans))
        return out

    def _indexed_already(self, target: Target, index: IndexSuggestion) -> bool:
        """Whether the table has an index leading with the suggested columns: a plan can show a
        table read whole although one exists (DuckDB picks its index as the statement starts, so
        its EXPLAIN shows an indexed lookup as a sequential scan). Unknown: False, advise."""
        if self.sql_path is None:
            return False
        engine = target.engine
        try:
            with self.sql_path.targets.connection(target.target_id) as (_, conn):
                facts = engine.table_facts(conn, index.schema or engine.default_schema(target), index.table)
        except (GatewayError, *engine.errors):
            return False
        wanted = [c.lower() for c in index.columns]
        return any([str(c).lower() for c in i["columns"][: len(wanted)]] == wanted for i in facts["indexes"])
