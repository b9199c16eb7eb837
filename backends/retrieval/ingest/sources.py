"""Stream rows out of a source table, through its engine's source session (server-side cursors).

A reader runs three kinds of query, all read-only and all built from validated identifiers
(the admin's `where_sql` is the only free text, and only admins can write it):

    count(cursor)          rows still to read, for the job's ETA
    rows(cursor, n)        the rows past the cursor in cursor order, yielded n at a time
    keys(columns, n)       every key currently in the table, for the deletion scan

The SQL is built here, quoted and parameterised for the target's engine; the engine opens the
session (`Engine.source_session`: its own connect, read-only, no statement timeout) and streams
the rows, so memory stays bounded by the batch size whatever the table size. Driver errors are
translated here, as the engine classifies them (`Engine.source_refused`), into UNAVAILABLE
(cannot reach or read the source) or INVALID_ARGUMENT (the source definition names a table or
column the database does not have), with messages that never carry the driver's text.
"""

from __future__ import annotations

import datetime as dt
import decimal
import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

from backends.targets import Target
from gateway.errors import GatewayError, InvalidArgument, Unavailable

log = logging.getLogger("mcp_gateway.rag.ingest")
CONNECT_TIMEOUT_S = 5


# -- the cursor: where the last committed batch ended --------------------------------------
def encode_value(value: Any) -> Any:
    """A watermark/key value as JSON (rag_sync_state.cursor_json), round-trippable."""
    if isinstance(value, dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$hex": bytes(value).hex()}
    return value


def decode_value(value: Any) -> Any:
    if isinstance(value, dict):
        if "$datetime" in value:
            return dt.datetime.fromisoformat(value["$datetime"])
        if "$date" in value:
            return dt.date.fromisoformat(value["$date"])
        if "$decimal" in value:
            return decimal.Decimal(value["$decimal"])
        if "$hex" in value:
            return bytes.fromhex(value["$hex"])
    return value


@dataclass(frozen=True)
class ReadPlan:
    """What to select and in which order; built once per sync from the source definition."""

    table: str
    columns: tuple[str, ...]  # selected, keys first
    pk_columns: tuple[str, ...]
    watermark_column: str  # "" = append-only: the primary key is the cursor
    where_sql: str = ""

    @property
    def order_columns(self) -> tuple[str, ...]:
        return ((self.watermark_column,) if self.watermark_column else ()) + self.pk_columns

    def cursor_of(self, row: dict[str, Any]) -> dict[str, Any]:
        if self.watermark_column:
            return {"watermark": encode_value(row[self.watermark_column])}
        return {"pk": [encode_value(row[c]) for c in self.pk_columns]}


class SourceSession(Protocol):
    """What an engine's source session does (backends/engines/<engine>.py, `source_session`);
    each call raises the engine's driver errors."""

    def scalar(self, sql: str, params: list[Any]) -> Any: ...
    def stream(self, sql: str, params: list[Any], batch_rows: int) -> Iterator[tuple[list[str], list[tuple]]]: ...
    def close(self) -> None: ...


class SourceReader:
    """One sync's reads of one source table: the SQL, and the engine's session that runs it."""

    session: SourceSession  # from open()

    def __init__(self, target: Target, plan: ReadPlan, *, source_name: str) -> None:
        self.target, self.plan, self.source_name = target, plan, source_name
        self.engine = target.engine
        self.placeholder = self.engine.placeholder

    # -- SQL -------------------------------------------------------------------------------
    def quote(self, identifier: str) -> str:
        return ".".join(self.engine.quote(part) for part in identifier.split("."))

    def _where(self, cursor: dict[str, Any] | None) -> tuple[str, list[Any]]:
        clauses, params = [], []
        if self.plan.where_sql.strip():
            clauses.append(f"({self.plan.where_sql})")
        if cursor and "watermark" in cursor and cursor["watermark"] is not None:
            # Inclusive: rows updated at exactly the last watermark after that sync are read
            # again (harmless, writes are idempotent) instead of being missed.
            clauses.append(f"{self.quote(self.plan.watermark_column)} >= {self.placeholder}")
            params.append(decode_value(cursor["watermark"]))
        elif cursor and cursor.get("pk"):
            keys = ", ".join(self.quote(c) for c in self.plan.pk_columns)
            marks = ", ".join(self.placeholder for _ in self.plan.pk_columns)
            clauses.append(f"({keys}) > ({marks})")
            params.extend(decode_value(v) for v in cursor["pk"])
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), params

    def rows_sql(self, cursor: dict[str, Any] | None) -> tuple[str, list[Any]]:
        where, params = self._where(cursor)
        cols = ", ".join(self.quote(c) for c in self.plan.columns)
        order = ", ".join(self.quote(c) for c in self.plan.order_columns)
        return f"SELECT {cols} FROM {self.quote(self.plan.table)}{where} ORDER BY {order}", params

    def count_sql(self, cursor: dict[str, Any] | None) -> tuple[str, list[Any]]:
        where, params = self._where(cursor)
        return f"SELECT COUNT(*) FROM {self.quote(self.plan.table)}{where}", params

    def keys_sql(self, columns: tuple[str, ...]) -> str:
        where, _ = self._where(None)
        return f"SELECT {', '.join(self.quote(c) for c in columns)} FROM {self.quote(self.plan.table)}{where}"

    # -- the session -----------------------------------------------------------------------
    def __enter__(self) -> SourceReader:
        self.open()
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def open(self) -> None:
        # A sync streams for as long as the table takes: no statement timeout (0: none), unlike
        # the interactive tools; the target's credentials, TLS and read-only session otherwise.
        untimed = replace(self.target, timeout_ms=0)
        try:
            self.session = self.engine.source_session(untimed, connect_timeout_s=CONNECT_TIMEOUT_S)
        except (*self.engine.errors, OSError) as exc:
            raise self._unavailable(f"open the {self.engine.title} file" if self._is_file else "connect", exc) from exc

    def close(self) -> None:
        self.session.close()

    def count(self, cursor: dict[str, Any] | None) -> int:
        sql, params = self.count_sql(cursor)
        try:
            return int(self.session.scalar(sql, params))
        except self.engine.errors as exc:
            raise self._failed(exc, "count rows") from exc

    def _stream(self, sql: str, params: list[Any], batch_rows: int) -> Iterator[tuple[list[str], list[tuple]]]:
        try:
            yield from self.session.stream(sql, params, batch_rows)
        except self.engine.errors as exc:
            raise self._failed(exc, "read rows") from exc

    def rows(self, cursor: dict[str, Any] | None, batch_rows: int) -> Iterator[list[dict[str, Any]]]:
        sql, params = self.rows_sql(cursor)
        for names, batch in self._stream(sql, params, batch_rows):
            yield [dict(zip(names, row)) for row in batch]

    def keys(self, columns: tuple[str, ...], batch_rows: int) -> Iterator[list[dict[str, Any]]]:
        sql = self.keys_sql(columns)
        _, params = self._where(None)
        for names, batch in self._stream(sql, params, batch_rows):
            yield [dict(zip(names, row)) for row in batch]

    # -- errors ----------------------------------------------------------------------------
    def _failed(self, exc: Exception, doing: str) -> GatewayError:
        return self._bad_definition(exc) if self.engine.source_refused(exc) else self._unavailable(doing, exc)

    def _unavailable(self, doing: str, exc: Exception) -> GatewayError:
        log.warning("rag source %s: %s failed: %r", self.source_name, doing, exc)
        return Unavailable(f"source {self.source_name!r}: cannot {doing} ({self.target.protocol} at {self._where_at()})")

    def _bad_definition(self, exc: Exception) -> GatewayError:
        log.warning("rag source %s: query refused: %r", self.source_name, exc)
        return InvalidArgument(
            f"source {self.source_name!r}: the source database refused the sync query; check table_name, "
            "pk_columns, watermark_column, where_sql and the columns doc_map_json names"
        )

    @property
    def _is_file(self) -> bool:
        return not self.engine.default_port  # not a network server: a local file

    def _where_at(self) -> str:
        if self._is_file:
            return f"a {self.engine.title} file"
        return f"{self.target.host}:{self.target.port}"


def open_reader(target: Target, plan: ReadPlan, *, source_name: str) -> SourceReader:
    reader = SourceReader(target, plan, source_name=source_name)
    reader.open()
    return reader
