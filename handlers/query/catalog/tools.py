"""discovery.run_static, discovery.status and the catalog.* tools of /mcp/query.

The catalog lives in <data_dir>/catalog.db (store.py), opened on first use. Write tools
(discovery.run_static, catalog.upsert, catalog.delete, catalog.clear, and the agent memory
tools) are refused while mcp-catalog_writes is false. Listing over mcp-query_summary_threshold
objects answers with a summary and suggested next calls (summarized=true) unless the caller
asks for the page itself (summarize=false) or is already paging.
"""

from __future__ import annotations

import json
import time
from typing import Any

from backends.engines import engine_for
from backends.pools import TargetPools
from gateway.errors import InvalidArgument, NotFound
from gateway.tools import CallContext, tool
from handlers.query import join_inference as infer
from handlers.query.catalog.access import DiscoveryCatalog, require_writes
from handlers.query.catalog.models import (
    CatalogObject,
    ClearIn,
    CountOut,
    DeleteIn,
    GetIn,
    GetOut,
    ListIn,
    ListOut,
    RelationshipsIn,
    RelationshipsOut,
    RunsOut,
    RunStaticIn,
    RunStatus,
    RunStatusIn,
    SearchIn,
    SearchOut,
    UpsertIn,
    UpsertOut,
)
from handlers.query.catalog.store import CatalogStore
from handlers.query.discovery import decode_page_token, encode_page_token
from handlers.query.join_inference import Candidate
from handlers.query.variables import SUMMARY_THRESHOLD, variable

INFERRED_TABLES_MAX = 300  # catalog.get_relationships infers joins schema-wide only below this many tables
OBJECT_TYPES = ("schema", "table", "view", "materialized_view", "foreign_table", "virtual_table", "column")


class CatalogTools:
    """discovery.* and catalog.*: the discovery catalog, and the targets' pools to resolve the
    targets they name."""

    def __init__(self, catalog: DiscoveryCatalog, pools: TargetPools) -> None:
        self.catalog = catalog
        self.pools = pools

    # -- discovery ---------------------------------------------------------------------------
    @tool("discovery.run_static", title="Harvest a target into the catalog", read_only=False)
    def run_static(self, args: RunStaticIn, ctx: CallContext) -> RunStatus:
        """Harvest a target's schemas, tables, views, columns, keys, indexes and comments into the catalog as a new numbered run; returns run_id, state and counts.

        The run is a background job: this call waits up to wait_s for it, then returns its
        progress while it continues (follow it with discovery.status). Earlier runs and what
        agents recorded stay searchable. Refused while mcp-catalog_writes is false."""
        require_writes(ctx)
        target = self.pools.resolve(args.target_id)
        if not target.allow_discovery:
            raise InvalidArgument(f"discovery is disabled for target {target.target_id} (allow_discovery=0)")
        jobs = self.catalog.jobs()
        run_id = jobs.start(target, args.schema_filter, args.notes)
        return RunStatus(**jobs.wait(run_id, min(args.wait_s, ctx.remaining_s() - 0.5)))

    @tool("discovery.status", title="Discovery run status", read_only=True)
    def discovery_status(self, args: RunStatusIn, ctx: CallContext) -> RunsOut:
        """Progress and counts of discovery runs: one run_id, or the most recent runs (of a target)."""
        store = self.catalog.store()
        if args.run_id is not None:
            status = store.run(args.run_id)
            if status is None:
                raise NotFound(f"no discovery run {args.run_id}")
            return RunsOut(runs=[RunStatus(**status)])
        return RunsOut(runs=[RunStatus(**s) for s in store.runs(args.target_id, args.limit)])

    # -- reading -----------------------------------------------------------------------------
    @tool("catalog.get", title="Get a catalog object", read_only=True)
    def catalog_get(self, args: GetIn, ctx: CallContext) -> GetOut:
        """One catalog object by object_id, or by target_id + schema + name (table or table.column), with its columns, relationships and agents' summaries."""
        store = self.catalog.store()
        if args.object_id is not None:
            obj = store.get(args.object_id)
        elif args.target_id and args.name is not None:
            table, _, column = args.name.partition(".")
            obj = store.find(args.target_id, args.run_id, args.schema_ or "", table, column)
        else:
            raise InvalidArgument("give object_id, or target_id, schema and name")
        if obj is None:
            raise NotFound("no such object in the catalog (discovery.run_static harvests a target)")
        columns = store.columns_of(obj) if obj["object_type"] not in ("column", "schema") else []
        relationships = (
            store.relationships(obj["target_id"], run_id=obj["run_id"] or None, schema=obj["schema_name"], table=obj["table_name"])
            if obj["table_name"] else []
        )  # fmt: skip
        summaries = self.catalog.memory().summaries(obj["target_id"], name=obj["name"])
        return GetOut(
            object=CatalogObject(**obj),
            columns=[CatalogObject(**c) for c in columns],
            relationships=relationships,
            summaries=summaries,
        )

    @tool("catalog.list", title="List catalog objects", read_only=True)
    def catalog_list(self, args: ListIn, ctx: CallContext) -> ListOut:
        """List the catalog objects of a target's run (default: its newest finished run), filtered by object_type and schema_name, paged.

        Over mcp-query_summary_threshold objects (and no page_token), the answer is a summary
        (counts per schema and type, the biggest tables) with suggested next calls, and
        summarized=true; summarize=false lists anyway."""
        store = self.catalog.store()
        run_id = args.run_id if args.run_id is not None else store.latest_run(args.target_id)
        scope = ("catalog.list", args.target_id, run_id, args.object_type, args.schema_name)
        after = decode_page_token(args.page_token, *scope)
        threshold = variable(ctx, SUMMARY_THRESHOLD)
        if args.summarize is not False and not args.page_token:
            summary = store.summary(args.target_id, run_id, args.object_type, args.schema_name, biggest=20)
            if args.summarize or summary["total"] > threshold:
                return ListOut(
                    run_id=run_id, objects=[], next_page_token=None, truncated=True, summarized=True, summary=summary,
                    suggested_calls=self._suggestions(args.target_id, run_id, summary),
                )  # fmt: skip
        found = store.list(args.target_id, run_id, args.object_type, args.schema_name, int(after or 0), args.page_size + 1)
        more = len(found) > args.page_size
        found = found[: args.page_size]
        token = encode_page_token(str(found[-1]["object_id"]), *scope) if more else None
        return ListOut(
            run_id=run_id, objects=[CatalogObject(**o) for o in found], next_page_token=token, truncated=more, summarized=False
        )

    @staticmethod
    def _suggestions(target_id: str, run_id: int | None, summary: dict[str, Any]) -> list[dict[str, Any]]:
        calls = [{"tool": "catalog.search", "arguments": {"target_id": target_id, "query": "<words from names or comments>"}}]
        for schema in list(summary["per_schema"])[:5]:
            calls.append({"tool": "catalog.list", "arguments": {"target_id": target_id, "run_id": run_id, "schema_name": schema, "object_type": "table", "summarize": False}})  # fmt: skip
        for table in summary["biggest_tables"][:3]:
            calls.append({"tool": "catalog.get", "arguments": {"target_id": target_id, "schema": table["schema_name"], "name": table["table_name"]}})  # fmt: skip
        return calls

    @tool("catalog.search", title="Search the catalog", read_only=True)
    def catalog_search(self, args: SearchIn, ctx: CallContext) -> SearchOut:
        """Full-text search (FTS5, bm25-ranked) over the names, comments, notes and tags of catalog objects; filter by target, run, type and schema."""
        found = self.catalog.store().search(
            args.query, args.target_id, args.run_id, args.object_type, args.schema_name, args.limit
        )
        return SearchOut(results=[CatalogObject(**r) for r in found])

    @tool("catalog.get_relationships", title="Catalog relationships", read_only=True)
    def catalog_get_relationships(self, args: RelationshipsIn, ctx: CallContext) -> RelationshipsOut:
        """Relationships of a target's catalog: declared foreign keys, view dependencies and agents' joins, and with include_inferred the joins inferred from names, types and keys."""
        store = self.catalog.store()
        run_id = args.run_id if args.run_id is not None else store.latest_run(args.target_id)
        found = [
            {**r, "source": "catalog"}
            for r in store.relationships(args.target_id, run_id=run_id, schema=args.schema_, table=args.table)
            if r["confidence"] >= args.min_confidence
        ]
        notes: list[str] = []
        if args.include_inferred and run_id is not None:
            inferred, note = self._inferred(store, args, run_id)
            known = {
                (
                    r["from_schema"],
                    r["from_table"],
                    tuple(r["from_columns"]),
                    r["to_schema"],
                    r["to_table"],
                    tuple(r["to_columns"]),
                )
                for r in found
            }
            found += [
                {"kind": "inferred", "from_schema": c.from_schema, "from_table": c.from_table, "from_columns": c.from_columns,
                 "to_schema": c.to_schema, "to_table": c.to_table, "to_columns": c.to_columns, "confidence": c.confidence,
                 "evidence": c.evidence, "source": "catalog"}
                for c in inferred if c.key() not in known and c.confidence >= args.min_confidence
            ]  # fmt: skip
            notes += note
        return RelationshipsOut(run_id=run_id, relationships=found, notes=notes)

    def _inferred(self, store: CatalogStore, args: RelationshipsIn, run_id: int) -> tuple[list[Candidate], list[str]]:
        tables = store.list(args.target_id, run_id, "table", args.schema_, 0, INFERRED_TABLES_MAX + 1)
        if len(tables) > INFERRED_TABLES_MAX and not args.table:
            return [], [f"more than {INFERRED_TABLES_MAX} tables: give table to infer its joins"]
        if len(tables) > INFERRED_TABLES_MAX:
            tables = store.list(args.target_id, run_id, "table", args.schema_, 0, 100_000)
        protocol = (store.run(run_id) or {}).get("protocol") or self.pools.resolve(args.target_id).protocol
        facts = engine_for(protocol).profiling  # the engine the harvest read
        by_schema: dict[str, list[dict[str, Any]]] = {}
        for t in tables:
            d = t["definition"]
            by_schema.setdefault(t["schema_name"], []).append(
                {"name": t["table_name"], "type": "table", "columns": d.get("columns", []), "primary_key": d.get("primary_key", []),
                 "unique": d.get("unique", []), "foreign_keys": []}
            )  # fmt: skip
        out: list[Candidate] = []
        for schema, members in by_schema.items():
            for child in members:
                if args.table and child["name"] != args.table:
                    out += [
                        c
                        for c in infer.inferred_candidates(schema, child, [m for m in members if m["name"] == args.table], facts)
                    ]
                    continue
                out += infer.inferred_candidates(schema, child, members, facts)
        return infer.strongest_per_column(out), [
            "inferred from names, types and keys only (confidence unmeasured; suggest_joins measures)"
        ]

    # -- writing -----------------------------------------------------------------------------
    @tool("catalog.upsert", title="Write a catalog object", read_only=False)
    def catalog_upsert(self, args: UpsertIn, ctx: CallContext) -> UpsertOut:
        """Add or update a catalog object: notes, tags, a comment or a definition, by object_id or by target + type + names. Refused while mcp-catalog_writes is false."""
        require_writes(ctx)
        store = self.catalog.store()
        o = args.object
        tags = " ".join(t.strip() for t in args.tags if t.strip())[:2000]
        definition = json.dumps(o.definition) if o.definition is not None else None
        if definition is not None and len(definition) > 65_536:
            raise InvalidArgument("definition is larger than 64 KiB as JSON")
        if o.object_id is not None:
            if store.get(o.object_id) is None:
                raise NotFound(f"no catalog object {o.object_id}")
            object_id = store.upsert({"object_id": o.object_id, "comment": o.comment, "notes": args.notes, "tags": tags if args.tags else None, "definition_json": definition})  # fmt: skip
        else:
            if not o.target_id or o.object_type not in OBJECT_TYPES or not o.schema_name and o.object_type != "schema":
                raise InvalidArgument(
                    f"give object_id, or target_id, object_type (one of {', '.join(OBJECT_TYPES)}) and schema_name"
                )
            self.pools.resolve(o.target_id)
            object_id = store.upsert(
                {"target_id": o.target_id, "run_id": o.run_id, "object_type": o.object_type, "schema_name": o.schema_name,
                 "table_name": o.table_name, "column_name": o.column_name, "comment": o.comment, "notes": args.notes,
                 "tags": tags, "definition_json": definition}
            )  # fmt: skip
        found = store.get(object_id)
        assert found is not None
        return UpsertOut(object=CatalogObject(**found))

    @tool("catalog.delete", title="Delete a catalog object", read_only=False, destructive=True)
    def catalog_delete(self, args: DeleteIn, ctx: CallContext) -> CountOut:
        """Delete one catalog object by object_id. Refused while mcp-catalog_writes is false."""
        require_writes(ctx)
        if not self.catalog.store().delete(args.object_id):
            raise NotFound(f"no catalog object {args.object_id}")
        return CountOut(deleted={"objects": 1})

    @tool("catalog.clear", title="Clear a target's catalog", read_only=False, destructive=True)
    def catalog_clear(self, args: ClearIn, ctx: CallContext) -> CountOut:
        """Delete a target's catalog objects, harvested relationships and runs (or one run's); agent memory stays. Refused while mcp-catalog_writes is false."""
        require_writes(ctx)
        started = time.monotonic()
        counts = self.catalog.store().clear(args.target_id, args.run_id)
        counts["ms"] = int((time.monotonic() - started) * 1000)
        return CountOut(deleted=counts)
