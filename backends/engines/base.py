"""What every database engine provides (`Engine`), and the engine-neutral pieces they share.

An engine is one object in its own module (backends/engines/mysql.py, postgresql.py,
sqlite.py) holding everything the gateway knows about that kind of server: how to connect and
keep a pooled session healthy, how to run one statement read-only under caps, its SQL dialect
(what the read-only check allows), its catalogs, and which of its driver's exceptions mean
what for the gateway (`translate`: one table per driver, applied where the driver is called).
A target chooses its engine once, from its protocol (`Target.engine`, backends/engines/__init__.py).

Engines never import backends.targets (targets imports the registry): what they need of a
target is `TargetSettings`, which `Target` satisfies.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from backends.engines.admin import TargetAdmin
from backends.engines.plans import FullScan
from backends.engines.profiling import Profiling
from backends.values import encode_row, row_bytes
from gateway.errors import GatewayError, Unavailable

CANCELLED = "the statement was cancelled on the database server (admin_kill_query or the database's own tools)"


class TargetSettings(Protocol):
    """The parts of a target (backends.targets.Target) an engine reads to connect and run."""

    @property
    def target_id(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def database(self) -> str: ...  # the file path for SQLite
    @property
    def username(self) -> str: ...
    @property
    def password(self) -> str: ...
    @property
    def default_schema(self) -> str: ...
    @property
    def timeout_ms(self) -> int: ...
    @property
    def use_ssl(self) -> bool: ...
    @property
    def ssl_mode(self) -> str: ...


@dataclass(frozen=True, eq=False)  # eq=False: hashed by identity, a cheap key of the check's caches
class ReadOnlyRules:
    """What backends/readonly.py needs of an engine's SQL: its sqlglot dialect, what it refuses
    beyond the shared allowlist, and which statement forms other than SELECT it accepts."""

    dialect: str  # sqlglot's name for it
    # Names refused wherever they are called; the check refuses every engine's list on every
    # engine (a name dangerous on one costs nothing to refuse on the others) - as calls only.
    denied_functions: frozenset[str] = frozenset()
    denied_prefixes: tuple[str, ...] = ()  # families: every pg_sleep*, dblink*, ...
    # Table names refused on this engine only (elsewhere they are somebody's tables).
    denied_tables: frozenset[str] = frozenset()  # catalogs holding credentials
    denied_schemas: frozenset[str] = frozenset()  # schemas holding credentials (mysql.user ...)
    replacement_scans: bool = False  # a table name that looks like a file path is read as that file (DuckDB)
    show_and_describe: bool = False  # SHOW ... and DESCRIBE <table> parse as statements (MySQL)
    show_setting: bool = False  # SHOW <setting> read on the raw text (PostgreSQL)
    explain_query_plan: bool = False  # EXPLAIN QUERY PLAN <select> (SQLite)
    explain_options_in_parentheses: bool = False  # EXPLAIN ( ... ) are options, never a query (PostgreSQL)
    # Tokens the parser reads as another engine's operator, so the regenerated text would mean
    # something else (PostgreSQL's `<=>` is pgvector's distance, sqlglot's MySQL null-safe
    # equality): sqlglot token type name -> why it is refused and what to write instead.
    misread_tokens: tuple[tuple[str, str], ...] = ()


@dataclass
class ResultSet:
    columns: list[dict[str, str]]
    rows: list[list[Any]]
    truncated: bool
    truncated_reason: str | None  # "max_rows" | "max_bytes" | None
    result_bytes: int
    db_ms: float


def collect(raw_rows: Iterable[Any], *, max_rows: int, max_bytes: int) -> tuple[list[list[Any]], str | None, int]:
    """Encode rows until a cap: reading one row past max_rows is how we know more existed."""
    rows: list[list[Any]] = []
    total = 2  # the enclosing brackets
    for raw in raw_rows:
        if len(rows) >= max_rows:
            return rows, "max_rows", total
        encoded = encode_row(raw)
        size = row_bytes(encoded) + 1
        if total + size > max_bytes:
            return rows, "max_bytes", total
        rows.append(encoded)
        total += size
    return rows, None, total


# An engine's runner: (conn, sql, timeout_ms, max_rows, max_bytes, schema) -> (columns, rows, reason, size)
Runner = Callable[..., tuple]


def readonly_execute(run: Runner, *, local_settings: bool = False) -> Callable[..., ResultSet]:
    """An engine's `execute` (the protocol's signature) over its runner: the runner reads the
    statement under the caps; this times it and wraps what it read as a ResultSet. `params`:
    values the driver binds to the statement's placeholders (the engine's `placeholder` style);
    None: a statement without placeholders (the runner gets none). `settings` go to the runner
    of an engine with `local_settings` (it holds them transaction-locally), and are refused by
    any other (`refuse_settings`)."""

    def execute(
        conn: Any,
        sql: str,
        *,
        timeout_ms: int,
        max_rows: int,
        max_bytes: int,
        schema: str | None = None,
        params: Sequence[Any] | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> ResultSet:
        extra: dict[str, Any] = {} if params is None else {"params": params}
        if settings and local_settings:
            extra["settings"] = settings
        else:
            refuse_settings(settings)
        started = time.perf_counter()
        columns, rows, reason, size = run(
            conn, sql, timeout_ms=max(1, int(timeout_ms)), max_rows=max_rows, max_bytes=max_bytes, schema=schema, **extra
        )
        return ResultSet(
            columns=columns,
            rows=rows,
            truncated=reason is not None,
            truncated_reason=reason,
            result_bytes=size,
            db_ms=(time.perf_counter() - started) * 1000,
        )

    return execute


def json_plan(out: dict[str, Any]) -> Any:
    """The plan of an EXPLAIN ... FORMAT JSON run (ReadOnlySql.run with explain=...): its first value, parsed."""
    rows = out["rows"]
    if not rows:
        return None
    value = rows[0][0]
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


class Catalog(Protocol):
    """An engine's catalog reader on one connection, for the discovery tools. Names are bound
    as parameters; paging is keyset on the name in binary order (`after`)."""

    conn: Any

    def schemas(self, after: str, limit: int) -> list[str]: ...
    def schema_exists(self, schema: str) -> bool: ...
    def tables(self, schema: str, after: str, limit: int, name_filter: str | None) -> list[dict[str, Any]]: ...
    def table_kind(self, schema: str, table: str) -> str | None: ...
    def columns(self, schema: str, table: str) -> list[dict[str, Any]]: ...
    def constraints(self, schema: str, table: str) -> dict[str, Any]: ...


def refuse_settings(settings: Mapping[str, str] | None) -> None:
    """What an engine without transaction-local settings does when asked for some: refuse, so
    an identity meant for row-level security is never silently dropped (fails closed)."""
    if settings:
        raise Unavailable("this engine has no transaction-local settings; mcp-oauth_db_settings applies to PostgreSQL targets")


@contextlib.contextmanager
def no_settings_scope(conn: Any, settings: Mapping[str, str]) -> Iterator[None]:
    """`settings_scope` of an engine without local settings: nothing to hold, and any asked is refused."""
    refuse_settings(settings)
    yield


class Engine(Protocol):
    """One kind of database server, as the gateway uses it. One instance per engine (`ENGINE`)."""

    name: str  # the protocol a target names: mysql | pgsql | sqlite
    title: str  # for people: "MySQL/MariaDB", ...
    default_port: int  # 0: not a network server
    needs_auth_profile: bool  # False: a target may name none (a local file)
    dialect: str  # sqlglot's dialect name
    readonly: ReadOnlyRules
    placeholder: str  # the driver's parameter marker: %s or ?
    errors: tuple[type[Exception], ...]  # what its driver raises (once loaded: backends.drivers.driver_loaded)

    def quote(self, name: str) -> str:
        """An identifier quoted for this engine's SQL."""
        ...

    # -- target validation (backends/targets.py) --
    def config_problem(self, row: Mapping[str, Any]) -> str:
        """Why a well-formed target row of this engine cannot serve (no host, a missing file), or ''."""
        ...

    def default_schema(self, target: TargetSettings) -> str:
        """The schema a call runs in when it names none; '' when the target has no default."""
        ...

    # -- connections and the pool policy (backends/pools.py) --
    def connect(self, target: TargetSettings, *, timeout_s: float, io_timeout_s: float) -> Any:
        """A new session, read-only at the server, with the target's statement timeout."""
        ...

    def ping(self, conn: Any, target: TargetSettings, *, timeout_s: float) -> None:
        """Raise when a pooled connection is no longer usable."""
        ...

    def broken(self, conn: Any) -> bool:
        """True when a borrowed connection died (server restart, network, killed session)."""
        ...

    def needs_rollback(self, conn: Any) -> bool:
        """Whether a returned connection may hold an open transaction (a free check)."""
        ...

    def borrowed(self, conn: Any, target: TargetSettings) -> None:
        """Called as the pool hands a connection out (SQLite arms its deadline)."""
        ...

    def returned(self, conn: Any) -> None:
        """Called as a connection goes back to the pool."""
        ...

    # -- read-only execution (backends/sql.py) --
    def execute(
        self,
        conn: Any,
        sql: str,
        *,
        timeout_ms: int,
        max_rows: int,
        max_bytes: int,
        schema: str | None = None,
        params: Sequence[Any] | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> ResultSet:
        """Run one checked statement read-only, with a server-side timeout and the row/byte caps.
        `params` are bound by the driver to the statement's placeholders (`placeholder` style).
        `settings` (custom settings such as app.user_id, the caller's identity for row-level
        security) hold inside the statement's transaction only, where `local_settings`; an
        engine without them refuses any (`refuse_settings`)."""
        ...

    # -- transaction-local settings and who is connected (backends/sql.py, backends/callers.py) --
    local_settings: bool  # execute(settings=...) and settings_scope set them (PostgreSQL)

    def executes_on_loop(self, target: TargetSettings) -> bool:
        """Whether `execute` on this target's pooled connections waits only through
        gateway/loop_io.wait_socket, so it may run on the event loop (backends/sql.py)."""
        ...

    def settings_scope(self, conn: Any, settings: Mapping[str, str]) -> AbstractContextManager[None]:
        """A read-only transaction holding `settings` for reads outside `execute`
        (rag.fetch_from_source), ended whatever happens; engines without local settings refuse any."""
        ...

    def session_id(self, conn: Any) -> int | None:
        """The server's id of a connection (MariaDB PROCESSLIST.ID, PostgreSQL's backend pid), or None."""
        ...

    # -- similarity over the users' own vector columns (handlers/rag/similarity_tools.py) --
    vector_search: Any  # its SQL for similarity_search (PostgreSQL + pgvector), or None
    vector_search_refusal: str  # why similarity_search refuses this engine's targets when vector_search is None

    def bound_placeholder(self, position: int) -> str:
        """The driver's placeholder for the bound value at `position` (1-based): %s, $1 or ?."""
        ...

    def explain_prefix(self, conn: Any, *, analyze: bool) -> str:
        """The EXPLAIN form explain_sql puts before a checked SELECT (JSON plans where there are)."""
        ...

    def plan_of(self, out: dict[str, Any]) -> Any:
        """The plan in an explain run's result (ReadOnlySql.run with explain=...)."""
        ...

    def translate(self, exc: BaseException, *, timeout_ms: int = 0) -> GatewayError:
        """The gateway error for one of `errors`, with a safe message (never the driver's full text)."""
        ...

    # -- catalogs --
    def catalog(self, conn: Any) -> Catalog: ...

    def table_facts(self, conn: Any, schema: str, table: str) -> dict[str, Any]:
        """{rows_estimate, size_bytes, indexes} of one table, as the engine's catalog keeps them."""
        ...

    def has_rowid(self, conn: Any, schema: str, table: str) -> bool:
        """Whether the table has an implicit integer row key (SQLite's rowid)."""
        ...

    def snapshot(self, conn: Any, schema: str, tables: list[str] | None = None) -> dict[str, Any]:
        """A whole schema's structure (backends/engines/catalog.py Table) in a few statements."""
        ...

    # -- least privilege (backends/privileges.py) --
    def privilege_warnings(self, conn: Any) -> list[str]:
        """Plain-language warnings about what the session's account could do beyond reading."""
        ...

    # -- profiling SQL (handlers/query) --
    profiling: Profiling  # what table_profile, column_profile and suggest_joins build their SQL from
    explain_analyze: bool  # explain_sql can run analyze=true (SQLite: EXPLAIN QUERY PLAN only)
    database_is_schema: bool  # a target's database is one schema (MySQL): a catalog harvest defaults to it

    # -- accounts, processes, kill (handlers/admin) --
    def admin(self, target: TargetSettings) -> TargetAdmin:
        """The target's accounts and processes (backends/engines/admin.py); INVALID_ARGUMENT on an
        engine that has none (SQLite: a local file)."""
        ...

    # -- plans and index advice (handlers/ai) --
    def full_scans(self, plan: Any) -> list[FullScan]:
        """The tables a plan (plan_of's) reads whole, in plan order; [] when it shows none.
        Index statements are built by handlers/ai from `quote` and `dialect`."""
        ...

    # -- RAG source reader (retrieval ingestion) --
    def source_session(self, target: TargetSettings, *, connect_timeout_s: float) -> Any:
        """A read-only session a sync streams one source table through, opened by `connect`
        (backends/retrieval/ingest/sources.py SourceSession: scalar, stream, close). The caller
        gives the timeouts a sync needs; rows come through a server-side cursor, so memory stays
        bounded by the batch. Raises one of `errors`."""
        ...

    def source_refused(self, exc: BaseException) -> bool:
        """Whether a driver error means the source database refused the sync's query as written
        (a table or column it does not have), rather than could not be reached or read."""
        ...
