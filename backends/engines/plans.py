"""What an engine reads out of its execution plans (`Engine.full_scans`), in no engine's words.

Each engine knows its own plan shape (PostgreSQL's 'Seq Scan' nodes, MySQL's access_type ALL,
SQLite's QUERY PLAN rows); the index advice in handlers/ai/recommend reads only `FullScan`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FullScan:
    table: str  # as the plan names it: an alias on MariaDB
    alias: str  # what the statement calls it: the table itself when it has no alias
    rows_estimate: int | None  # the planner's estimate; None where the plan gives none (SQLite)


def plan_objects(plan: Any) -> Iterator[dict[str, Any]]:
    """Every object of a JSON plan, each before the objects inside it, in document order."""
    if isinstance(plan, dict):
        yield plan
        for value in plan.values():
            yield from plan_objects(value)
    elif isinstance(plan, list):
        for value in plan:
            yield from plan_objects(value)


def row_estimate(value: Any) -> int | None:
    """A plan's row estimate as an int; None when it is missing or not a number."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
