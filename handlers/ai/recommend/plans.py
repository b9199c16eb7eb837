"""The index that would serve a statement's predicates on a table its plan reads whole.

The full scans come from the target's engine (`Engine.full_scans` over explain_sql's plan). A
scan names the table by alias on MariaDB, by relation plus alias on PostgreSQL and SQLite, by
relation only on DuckDB, so the statement is parsed (sqlglot, in the engine's dialect) to map
aliases to tables and to find the columns its WHERE and JOIN conditions compare for that
alias: equality columns first, then one range column — the order a B-tree index serves best.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from backends.engines.plans import FullScan


@dataclass(frozen=True)
class IndexSuggestion:
    schema: str
    table: str
    columns: tuple[str, ...]

    def statement(self, quote: Callable[[str], str]) -> str:
        """The CREATE INDEX statement, its identifiers quoted by the target's engine (`Engine.quote`)."""
        name = "ix_" + "_".join([self.table, *self.columns])[:55]
        target = f"{quote(self.schema)}.{quote(self.table)}" if self.schema else quote(self.table)
        return f"CREATE INDEX {quote(name)} ON {target} ({', '.join(quote(c) for c in self.columns)})"


def suggest_index(sql: str, dialect: str, scan: FullScan, *, default_schema: str = "") -> IndexSuggestion | None:
    """The index for `scan`'s table from the statement's predicates on it, or None if none filter it.
    `dialect` is sqlglot's name for the target's SQL (`Engine.dialect`)."""
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except sqlglot.errors.ParseError:
        return None
    tables: dict[str, exp.Table] = {}
    for table in tree.find_all(exp.Table):
        tables[table.alias_or_name.lower()] = table
    table = tables.get(scan.alias.lower()) or tables.get(scan.table.lower()) or _only_table_named(tree, scan.table)
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


def _only_table_named(tree: exp.Expression, name: str) -> exp.Table | None:
    """The one table the statement reads under `name`, whatever its alias: a plan that names
    tables but not aliases (DuckDB) still finds it; a table read twice is ambiguous (None)."""
    found = [t for t in tree.find_all(exp.Table) if t.name.lower() == name.lower()]
    return found[0] if len(found) == 1 else None


def _compares_own_columns(predicate: exp.Expression, alias: str) -> bool:
    """`a.x = a.y` filters nothing an index on the table could seek with."""
    qualifiers = {c.table.lower() for c in predicate.find_all(exp.Column)}
    return len(list(predicate.find_all(exp.Column))) > 1 and qualifiers == {alias}
