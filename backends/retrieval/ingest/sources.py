"""Stream rows out of a source table: one reader per engine, all with server-side cursors.

A reader runs three kinds of query, all read-only and all built from validated identifiers
(the admin's `where_sql` is the only free text, and only admins can write it):

    count(cursor)          rows still to read, for the job's ETA
    rows(cursor, n)        the rows past the cursor in cursor order, yielded n at a time
    keys(columns, n)       every key currently in the table, for the deletion scan

Memory stays bounded by the batch size whatever the table size: MySQL/MariaDB rows come
through pymysql's unbuffered SSCursor, PostgreSQL rows through a named (server-side) cursor,
SQLite rows through a lazily stepped statement. Driver errors are translated here, at the
call site, into UNAVAILABLE (cannot reach or read the source) or INVALID_ARGUMENT (the
source definition names a table or column the database does not have), with messages that
never carry the driver's text.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import logging
import os
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from backends.engines.mysql import ssl_context as mysql_ssl
from backends.engines.postgresql import connect_kwargs as pg_kwargs
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


class SourceReader:
    """Base: SQL building per dialect; subclasses open connections and stream."""

    placeholder = "%s"
    quote_char = '"'

    def __init__(self, target: Target, plan: ReadPlan, *, source_name: str) -> None:
        self.target, self.plan, self.source_name = target, plan, source_name

    # -- SQL -------------------------------------------------------------------------------
    def quote(self, identifier: str) -> str:
        q = self.quote_char
        return ".".join(q + part.replace(q, q + q) + q for part in identifier.split("."))

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

    # -- engine specific -------------------------------------------------------------------
    def __enter__(self) -> SourceReader:
        self.open()
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def open(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def count(self, cursor: dict[str, Any] | None) -> int:
        raise NotImplementedError

    def _stream(self, sql: str, params: list[Any], batch_rows: int) -> Iterator[tuple[list[str], list[tuple]]]:
        raise NotImplementedError

    def rows(self, cursor: dict[str, Any] | None, batch_rows: int) -> Iterator[list[dict[str, Any]]]:
        sql, params = self.rows_sql(cursor)
        for names, batch in self._stream(sql, params, batch_rows):
            yield [dict(zip(names, row)) for row in batch]

    def keys(self, columns: tuple[str, ...], batch_rows: int) -> Iterator[list[dict[str, Any]]]:
        sql = self.keys_sql(columns)
        _, params = self._where(None)
        for names, batch in self._stream(sql, params, batch_rows):
            yield [dict(zip(names, row)) for row in batch]

    def _unavailable(self, doing: str, exc: Exception) -> GatewayError:
        log.warning("rag source %s: %s failed: %r", self.source_name, doing, exc)
        return Unavailable(f"source {self.source_name!r}: cannot {doing} ({self.target.protocol} at {self._where_at()})")

    def _bad_definition(self, exc: Exception) -> GatewayError:
        log.warning("rag source %s: query refused: %r", self.source_name, exc)
        return InvalidArgument(
            f"source {self.source_name!r}: the source database refused the sync query; check table_name, "
            "pk_columns, watermark_column, where_sql and the columns doc_map_json names"
        )

    def _where_at(self) -> str:
        if self.target.protocol == "sqlite":
            return "a SQLite file"
        return f"{self.target.host}:{self.target.port}"


class MySQLReader(SourceReader):
    quote_char = "`"

    def open(self) -> None:
        import pymysql

        try:
            self.conn = pymysql.connect(
                host=self.target.host,
                port=self.target.port or 3306,
                user=self.target.username,
                password=self.target.password,
                database=self.target.database or self.target.default_schema or None,
                charset="utf8mb4",
                connect_timeout=CONNECT_TIMEOUT_S,
                autocommit=True,
                ssl=mysql_ssl(self.target),
            )
            with self.conn.cursor() as cur:
                cur.execute("SET SESSION TRANSACTION READ ONLY")
                # The reader may wait on a full pipeline queue while the model embeds: do not
                # let the server drop a slow-reading client mid-stream.
                cur.execute("SET SESSION net_write_timeout = 3600")
        except pymysql.err.MySQLError as exc:
            raise self._unavailable("connect", exc) from exc

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()

    def _translate(self, exc: Exception, doing: str) -> GatewayError:
        import pymysql

        if isinstance(exc, pymysql.err.ProgrammingError | pymysql.err.InternalError):
            return self._bad_definition(exc)
        return self._unavailable(doing, exc)

    def count(self, cursor: dict[str, Any] | None) -> int:
        import pymysql

        sql, params = self.count_sql(cursor)
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql, params)
                return int(cur.fetchone()[0])
        except pymysql.err.MySQLError as exc:
            raise self._translate(exc, "count rows") from exc

    def _stream(self, sql: str, params: list[Any], batch_rows: int) -> Iterator[tuple[list[str], list[tuple]]]:
        import pymysql

        try:
            cur = self.conn.cursor(pymysql.cursors.SSCursor)
            cur.execute(sql, params)
            names = [d[0] for d in cur.description]
            while True:
                batch = cur.fetchmany(batch_rows)
                if not batch:
                    break
                yield names, list(batch)
            cur.close()
        except pymysql.err.MySQLError as exc:
            raise self._translate(exc, "read rows") from exc


class PostgresReader(SourceReader):
    def open(self) -> None:
        import psycopg

        try:
            # The target's TLS and credentials, but no statement timeout: a sync streams for
            # as long as the table takes, unlike the interactive tools.
            settings = {**pg_kwargs(self.target, connect_timeout_s=CONNECT_TIMEOUT_S), "application_name": "mcp-gateway-rag-sync"}
            settings["options"] = "-c default_transaction_read_only=on"
            self.conn = psycopg.connect(**settings)
            self.conn.read_only = True
        except psycopg.Error as exc:
            raise self._unavailable("connect", exc) from exc

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()

    def _translate(self, exc: Exception, doing: str) -> GatewayError:
        import psycopg

        with contextlib.suppress(Exception):
            self.conn.rollback()
        if isinstance(exc, psycopg.errors.ProgrammingError | psycopg.errors.DataError):
            return self._bad_definition(exc)
        return self._unavailable(doing, exc)

    def count(self, cursor: dict[str, Any] | None) -> int:
        import psycopg

        sql, params = self.count_sql(cursor)
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql, params)
                value = int(cur.fetchone()[0])
            self.conn.commit()
            return value
        except psycopg.Error as exc:
            raise self._translate(exc, "count rows") from exc

    def _stream(self, sql: str, params: list[Any], batch_rows: int) -> Iterator[tuple[list[str], list[tuple]]]:
        import psycopg

        try:
            with self.conn.cursor(name="rag_sync_stream") as cur:
                cur.itersize = batch_rows
                cur.execute(sql, params)
                names = [d.name for d in cur.description]
                while True:
                    batch = cur.fetchmany(batch_rows)
                    if not batch:
                        break
                    yield names, batch
            self.conn.commit()
        except psycopg.Error as exc:
            raise self._translate(exc, "read rows") from exc


class SQLiteReader(SourceReader):
    placeholder = "?"

    def open(self) -> None:
        import apsw

        from gateway import sqlite

        try:
            # mode=ro: the sync never writes a source; a missing file is an error, not a new db.
            self.conn = sqlite.connect(f"file:{urllib.parse.quote(os.path.abspath(self.target.database))}?mode=ro", readonly=True)
            self.conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        except apsw.Error as exc:
            raise self._unavailable("open the SQLite file", exc) from exc

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()

    def count(self, cursor: dict[str, Any] | None) -> int:
        import apsw

        sql, params = self.count_sql(cursor)
        try:
            return int(self.conn.execute(sql, params).fetchall()[0][0])
        except apsw.SQLError as exc:
            raise self._bad_definition(exc) from exc
        except apsw.Error as exc:
            raise self._unavailable("count rows", exc) from exc

    def _stream(self, sql: str, params: list[Any], batch_rows: int) -> Iterator[tuple[list[str], list[tuple]]]:
        import apsw

        try:
            cur = self.conn.execute(sql, params)
            names: list[str] = []
            batch: list[tuple] = []
            for row in cur:
                if not names:
                    names = [d[0] for d in cur.getdescription()]
                batch.append(row)
                if len(batch) >= batch_rows:
                    yield names, batch
                    batch = []
            if batch:
                yield names, batch
        except apsw.SQLError as exc:
            raise self._bad_definition(exc) from exc
        except apsw.Error as exc:
            raise self._unavailable("read rows", exc) from exc


READERS: dict[str, type[SourceReader]] = {"mysql": MySQLReader, "pgsql": PostgresReader, "sqlite": SQLiteReader}


def open_reader(target: Target, plan: ReadPlan, *, source_name: str) -> SourceReader:
    reader_class = READERS.get(target.protocol)
    if reader_class is None:
        raise InvalidArgument(f"source {source_name!r}: unsupported protocol {target.protocol!r}")
    reader = reader_class(target, plan, source_name=source_name)
    reader.open()
    return reader
