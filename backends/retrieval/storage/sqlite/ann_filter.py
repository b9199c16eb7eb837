"""Filters of a vector search: the conjunction of an allowed set, a per-rowid predicate and a
batch check, and `sql_filter`, which turns the tools' SQL filter into the cheapest of those."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import apsw
import orjson

# sql_filter materialises a filter's rowids only up to this many; a broader filter is checked
# on the ANN candidates instead.
EXACT_MAX_ROWIDS = 2_000
# Candidates checked by the first filter call; each further call checks twice as many.
FIRST_CHECK = 64


class Filter:
    """The conjunction of the search filters, remembering verdicts across over-fetch rounds."""

    def __init__(
        self,
        allowed_rowids: set[int] | None,
        allowed: Callable[[int], bool] | None,
        allowed_many: Callable[[list[int]], Collection[int]] | None,
    ) -> None:
        self.allowed_rowids, self.allowed, self.allowed_many = allowed_rowids, allowed, allowed_many
        self.is_empty = allowed_rowids is None and allowed is None and allowed_many is None
        self._verdicts: dict[int, bool] = {}

    def __call__(self, rowids: list[int]) -> list[int]:
        if self.is_empty:
            return rowids
        # The cheap checks first; only what survives them reaches the batch check (one SQL query).
        survivors = []
        for r in rowids:
            if r in self._verdicts:
                continue
            if (self.allowed_rowids is None or r in self.allowed_rowids) and (self.allowed is None or self.allowed(r)):
                survivors.append(r)
            else:
                self._verdicts[r] = False
        passed = set(self.allowed_many(survivors)) if self.allowed_many is not None and survivors else set(survivors)
        self._verdicts.update((r, r in passed) for r in survivors)
        return [r for r in rowids if self._verdicts[r]]

    def first(self, rowids: list[int], want: int) -> list[int]:
        """The passing rowids of a ranked list, checked in growing slices until `want` pass:
        a broad filter then costs one small check instead of one over every candidate."""
        if self.is_empty:
            return rowids
        found: list[int] = []
        start, step = 0, FIRST_CHECK
        while start < len(rowids) and len(found) < want:
            found += self(rowids[start : start + step])
            start, step = start + step, step * 2
        return found


def sql_filter(conn: apsw.Connection, where: str, params: Sequence[Any]) -> dict[str, Any]:
    """Search keyword arguments for a filter given as SQL over `rag_chunks c`.

    A filter admitting at most EXACT_MAX_ROWIDS chunks becomes an explicit set (scored exactly);
    a broader one becomes a batch check of the ANN candidates — never a materialised set of
    hundreds of thousands of rowids, which alone would cost more than the search. `where` is
    built by the caller from fixed fragments; user values are only in `params`."""
    if not admits_many(conn, where, params):
        return {"allowed_rowids": {r for (r,) in conn.execute(f"SELECT c.chunk_rowid FROM rag_chunks c WHERE {where}", params)}}
    return {"allowed_many": batch_check(conn, where, params)}


def admits_many(conn: apsw.Connection, where: str, params: Sequence[Any]) -> bool:
    """Whether the filter admits more than EXACT_MAX_ROWIDS chunks. Counts without building
    rows, and stops at the bound: for a broad filter this probe is all the set-building it costs."""
    probe = f"SELECT count(*) FROM (SELECT 1 FROM rag_chunks c WHERE {where} LIMIT ?)"
    return conn.execute(probe, (*params, EXACT_MAX_ROWIDS + 1)).fetchall()[0][0] > EXACT_MAX_ROWIDS


def batch_check(conn: apsw.Connection, where: str, params: Sequence[Any]) -> Callable[[list[int]], set[int]]:
    """The rowids of a batch that pass the filter: one SQL query per batch."""
    check = f"SELECT c.chunk_rowid FROM rag_chunks c WHERE c.chunk_rowid IN (SELECT value FROM json_each(?)) AND ({where})"

    def allowed_many(rowids: list[int]) -> set[int]:
        return {r for (r,) in conn.execute(check, (orjson.dumps(rowids), *params))}

    return allowed_many
