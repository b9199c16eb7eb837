"""Full scans in an execution plan, and the index that would serve the statement's predicates.

Plans come from explain_sql (JSON on PostgreSQL and MySQL/MariaDB; SQLite's EXPLAIN QUERY PLAN
rows). A scan names the table by alias on MariaDB and by relation plus alias on PostgreSQL, so
the statement is parsed (sqlglot) to map aliases to tables and to find the columns its WHERE and
JOIN conditions compare for that alias: equality columns first, then one range column — the
order a B-tree index serves best.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp

DIALECTS = {"mysql": "mysql", "pgsql": "postgres", "sqlite": "sqlite"}
_SQLITE_SCAN = re.compile(r"^SCAN (?:TABLE )?(?P<table>\S+)(?: AS (?P<alias>\S+))?(?! USING)", re.I)


@dataclass(frozen=True)
class FullScan:
    table: str  # as the plan names it: an alias on MariaDB
    alias: str
    rows_estimate: int | None


def full_scans(protocol: str, plan: Any) -> list[FullScan]:
    """The full table scans of a plan (Seq Scan, access_type ALL, SQLite SCAN without an index)."""
    found: list[FullScan] = []
    if protocol == "sqlite":
        for row in plan if isinstance(plan, list) else []:
            detail = str(row.get("detail", "")) if isinstance(row, dict) else str(row)
            match = _SQLITE_SCAN.match(detail)
            if match and "USING" not in detail.upper():
                found.append(FullScan(match["table"], match["alias"] or match["table"], None))
        return found

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if protocol == "pgsql" and node.get("Node Type") == "Seq Scan" and node.get("Relation Name"):
                found.append(
                    FullScan(node["Relation Name"], node.get("Alias") or node["Relation Name"], _int(node.get("Plan Rows")))
                )
            if protocol == "mysql" and node.get("access_type") == "ALL" and node.get("table_name"):
                found.append(FullScan(node["table_name"], node["table_name"], _int(node.get("rows"))))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(plan)
    return found


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class IndexSuggestion:
    schema: str
    table: str
    columns: tuple[str, ...]

    def statement(self, protocol: str) -> str:
        quote = (lambda s: f"`{s}`") if protocol == "mysql" else (lambda s: '"' + s.replace('"', '""') + '"')
        name = "ix_" + "_".join([self.table, *self.columns])[:55]
        target = f"{quote(self.schema)}.{quote(self.table)}" if self.schema else quote(self.table)
        return f"CREATE INDEX {quote(name)} ON {target} ({', '.join(quote(c) for c in self.columns)})"


def suggest_index(sql: str, protocol: str, scan: FullScan, *, default_schema: str = "") -> IndexSuggestion | None:
    """The index for `scan`'s table from the statement's predicates on it, or None if none filter it."""
    try:
        tree = sqlglot.parse_one(sql, read=DIALECTS.get(protocol, "mysql"))
    except sqlglot.errors.ParseError:
        return None
    tables: dict[str, exp.Table] = {}
    for table in tree.find_all(exp.Table):
        tables[table.alias_or_name.lower()] = table
    table = tables.get(scan.alias.lower()) or tables.get(scan.table.lower())
    if table is None:
        return None
    alias = table.alias_or_name.lower()
    single_table = len(tables) == 1
    equality: list[str] = []
    ranges: list[str] = []
    conditions = [w.this for w in tree.find_all(exp.Where)] + [j.args["on"] for j in tree.find_all(exp.Join) if j.args.get("on")]
    for condition in conditions:
        predicates = [
            n
            for n in condition.dfs()
            if isinstance(n, exp.EQ | exp.GT | exp.GTE | exp.LT | exp.LTE | exp.In | exp.Between | exp.Like)
        ]
        for predicate in predicates:  # in the order the statement writes them
            for column in predicate.find_all(exp.Column):
                qualifier = column.table.lower()
                if (qualifier == alias or (not qualifier and single_table)) and not _compares_own_columns(predicate, alias):
                    bucket = equality if isinstance(predicate, exp.EQ | exp.In) else ranges
                    if column.name not in equality and column.name not in ranges:
                        bucket.append(column.name)
    columns = tuple(equality + ranges[:1])
    if not columns:
        return None
    return IndexSuggestion(table.db or default_schema, table.name, columns)


def _compares_own_columns(predicate: exp.Expression, alias: str) -> bool:
    """`a.x = a.y` filters nothing an index on the table could seek with."""
    qualifiers = {c.table.lower() for c in predicate.find_all(exp.Column)}
    return len(list(predicate.find_all(exp.Column))) > 1 and qualifiers == {alias}
