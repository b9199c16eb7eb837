"""All SQLite access goes through here: apsw (a current bundled SQLite that can load
extensions; the stdlib module on this Python cannot), WAL mode, a busy timeout, and rows as
dicts. `schema_section` reads one section of the top-level `schema.sql`, so the DDL lives in
one file and the code applies it rather than keeping a copy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import apsw

BUSY_TIMEOUT_MS = 10_000


def connect(path: str | Path, *, readonly: bool = False, vec: bool = False) -> apsw.Connection:
    flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    conn = apsw.Connection(str(path), flags=flags | apsw.SQLITE_OPEN_URI)
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    if not readonly:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    if vec:
        load_sqlite_vec(conn)
    return conn


def load_sqlite_vec(conn: apsw.Connection) -> None:
    import sqlite_vec

    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    conn.enable_load_extension(False)


def rows(conn: apsw.Connection, sql: str, params: Iterable[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
    cursor = conn.execute(sql, params)
    try:
        names = [d[0] for d in cursor.getdescription()]
    except apsw.ExecutionCompleteError:
        return []
    return [dict(zip(names, row)) for row in cursor]


def scalar(conn: apsw.Connection, sql: str, params: Iterable[Any] | dict[str, Any] = ()) -> Any:
    for row in conn.execute(sql, params):
        return row[0]
    return None


class transaction:
    """`with transaction(conn):` runs BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on error."""

    def __init__(self, conn: apsw.Connection, mode: str = "IMMEDIATE") -> None:
        self.conn, self.mode = conn, mode

    def __enter__(self) -> apsw.Connection:
        self.conn.execute(f"BEGIN {self.mode}")
        return self.conn

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")


_SECTION = re.compile(r"^-- @section (\w+)\s*$", re.MULTILINE)


def schema_section(name: str) -> str:
    """The DDL between `-- @section <name>` and the next section marker in schema.sql."""
    # gateway/schema.sql is a link to the top-level schema.sql; wheels carry it as a file.
    text = resources.files("gateway").joinpath("schema.sql").read_text()
    parts = _SECTION.split(text)
    sections = dict(zip(parts[1::2], parts[2::2]))
    if name not in sections:
        raise KeyError(f"schema.sql has no section {name!r}")
    return sections[name]


def iter_statements(sql: str) -> Iterator[str]:
    """Split a script into complete statements. apsw.complete knows quotes, comments and
    trigger bodies, so a ';' only ends a statement where SQLite itself would end it."""
    start = 0
    for index, char in enumerate(sql):
        if char == ";" and apsw.complete(sql[start : index + 1]):
            statement = sql[start : index + 1].strip()
            if statement.strip(";").strip():
                yield statement
            start = index + 1
    rest = sql[start:].strip()
    if rest:
        yield rest
