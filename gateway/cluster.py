"""Configuration shared by a cluster of gateways: ProxySQL Cluster's idea on PostgreSQL.

With `mcp-cluster_dsn` set, every instance keeps its own memory and runtime layers (config.db,
shared by its workers) but the cluster's truth lives in PostgreSQL (schema.sql, section
cluster_postgres):

    mcp_cluster_runtime   per module: a version, the memory and runtime rows of the last LOAD
    mcp_cluster_disk      per module: the rows of the last SAVE ... TO DISK (the disk layer)
    mcp_cluster_members   per instance: last heartbeat and the module versions it serves

`LOAD <module> TO RUNTIME` on any instance validates locally, then publishes (version + 1 and a
NOTIFY on CHANNEL in the same PostgreSQL transaction) before it applies locally; if PostgreSQL
cannot be reached the LOAD fails UNAVAILABLE and changes nothing anywhere. Every worker of every
instance runs a `ClusterFollower`: it LISTENs, compares versions at each notification and once a
second anyway (the fallback when a notification is lost, e.g. across a PostgreSQL restart), and
copies a newer module into its instance's config.db, whose runtime version the workers already
poll. Variables declared `local` (port, bind address, certificates, the DSN itself) are never
published: each instance keeps its own.

The PostgreSQL driver is not imported here (gateway/ is the bottom layer): the link takes a
`ClusterDatabase`, which the app assembly provides (backends/engines/postgresql.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway import sqlite
from gateway.errors import Unavailable

log = logging.getLogger("mcp_gateway.cluster")

CHANNEL = "mcp_gateway_config"
POLL_S = 1.0  # the fallback when a notification is lost
HEARTBEAT_S = 1.0
STALE_AFTER_S = 5.0  # a member not heard from for this long is reported as lagging
CONNECT_TIMEOUT_S = 3
STATUS_CONNECT_TIMEOUT_S = 2  # get_status: libpq's minimum connect_timeout
STATUS_STATEMENT_TIMEOUT_MS = 2000
JOIN_LOCK_KEY = 0x6D63_7067_6A6F_696E  # pg_advisory_lock key serialising instances joining the cluster

Rows = dict[str, list[dict[str, Any]]]


class Cursor(Protocol):
    def fetchone(self) -> Sequence[Any] | None: ...
    def fetchall(self) -> list[Sequence[Any]]: ...


class ClusterConnection(Protocol):
    """The part of a PostgreSQL connection the cluster uses (psycopg's Connection has it)."""

    def execute(self, query: str, params: Sequence[Any] | None = None) -> Cursor: ...
    def transaction(self) -> AbstractContextManager[Any]: ...
    def notifies(self, *, timeout: float | None = None, stop_after: int | None = None) -> Iterable[Any]: ...


class ClusterDatabase(Protocol):
    """The PostgreSQL driver the cluster runs on, provided by the app assembly."""

    errors: tuple[type[Exception], ...]  # anything the driver raises
    unreachable: tuple[type[Exception], ...]  # the server cannot be reached (or the link broke)

    def connect(
        self, dsn: str, *, autocommit: bool, connect_timeout: int, application_name: str, options: str | None = None
    ) -> AbstractContextManager[ClusterConnection]:
        """A new connection (closed when the context ends)."""
        ...

    def json(self, value: Any) -> Any:
        """`value` as a parameter stored in a jsonb column."""
        ...


@dataclass(frozen=True)
class ClusterModule:
    module: str
    version: int
    memory: Rows
    runtime: Rows


def member_id(variables: dict[str, str]) -> str:
    """mcp-cluster_member_name, or host:port (the bound port once serving, else mcp-port)."""
    port = os.environ.get("MCP_GATEWAY_PORT") or variables.get("mcp-port") or "0"
    return variables.get("mcp-cluster_member_name") or f"{socket.gethostname()}:{port}"


@dataclass
class Contact:
    """What this process last knew of the cluster database: get_status answers from it while the
    database is unreachable, without waiting on a connection attempt the follower already failed."""

    reached_at: float | None = None  # unix time of the last round trip that worked
    versions: dict[str, int] = field(default_factory=dict)  # the modules' published versions then
    lost: bool = False  # the follower's connection is down (it retries with a backoff of at most 2 s)
    error: str = ""  # why, without the DSN

    def reached(self, versions: dict[str, int]) -> None:
        self.reached_at, self.versions, self.lost, self.error = time.time(), dict(versions), False, ""

    def lose(self, error: str) -> None:
        self.lost, self.error = True, error


class ClusterLink:
    """Short-lived connections for the rare writes and reads; PostgreSQL errors become UNAVAILABLE."""

    def __init__(self, dsn: str, member_id: str, database: ClusterDatabase) -> None:
        self.dsn = dsn
        self.member_id = member_id
        self.database = database
        self._schema_ready = False
        self.contact = Contact()

    @contextlib.contextmanager
    def connect(self, *, autocommit: bool = False, bounded: bool = False) -> Iterator[ClusterConnection]:
        """`bounded`: a read that must answer soon (get_status): a shorter connect timeout, and a
        statement timeout."""
        options = f"-c statement_timeout={STATUS_STATEMENT_TIMEOUT_MS}" if bounded else None
        timeout = STATUS_CONNECT_TIMEOUT_S if bounded else CONNECT_TIMEOUT_S
        try:
            with self.database.connect(
                self.dsn, autocommit=autocommit, connect_timeout=timeout, application_name="mcp-gateway", options=options
            ) as conn:
                if not self._schema_ready:
                    ensure_schema(conn)
                    self._schema_ready = True
                yield conn
        except self.database.unreachable as exc:
            # The driver's text may name the host and user; the DSN's password never reaches it.
            raise Unavailable(f"the cluster database is unreachable ({type(exc).__name__})") from exc

    @contextlib.contextmanager
    def join_lock(self) -> Iterator[None]:
        """Held while an instance starts: the first one publishes its configuration, the next adopt it."""
        with self.connect(autocommit=True) as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (JOIN_LOCK_KEY,))
            try:
                yield
            finally:
                with contextlib.suppress(*self.database.errors):
                    conn.execute("SELECT pg_advisory_unlock(%s)", (JOIN_LOCK_KEY,))

    def publish(self, module: str, memory: Rows, runtime: Rows) -> int:
        """Store a module's rows as its next version and announce it; returns the version."""
        with self.connect() as conn, conn.transaction():
            inserted = conn.execute(
                "INSERT INTO mcp_cluster_runtime (module, version, memory_rows, runtime_rows, loaded_by) "
                "VALUES (%s, 1, %s, %s, %s) ON CONFLICT (module) DO UPDATE SET version = mcp_cluster_runtime.version + 1, "
                "memory_rows = excluded.memory_rows, runtime_rows = excluded.runtime_rows, "
                "loaded_at = now(), loaded_by = excluded.loaded_by RETURNING version",
                (module, self.database.json(memory), self.database.json(runtime), self.member_id),
            ).fetchone()
            assert inserted is not None  # INSERT ... RETURNING always returns the row
            version = inserted[0]
            conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, json.dumps({"module": module, "version": version})))
        return int(version)

    def fetch(self, module: str) -> ClusterModule | None:
        with self.connect(autocommit=True) as conn:
            return fetch_module(conn, module)

    def versions(self) -> dict[str, int]:
        with self.connect(autocommit=True) as conn:
            return module_versions(conn)

    def save_disk(self, module: str, rows: Rows) -> None:
        with self.connect() as conn, conn.transaction():
            conn.execute(
                "INSERT INTO mcp_cluster_disk (module, disk_rows, saved_by) VALUES (%s, %s, %s) "
                "ON CONFLICT (module) DO UPDATE SET disk_rows = excluded.disk_rows, saved_at = now(), saved_by = excluded.saved_by",
                (module, self.database.json(rows), self.member_id),
            )

    def load_disk(self, module: str) -> Rows | None:
        with self.connect(autocommit=True) as conn:
            row = conn.execute("SELECT disk_rows FROM mcp_cluster_disk WHERE module = %s", (module,)).fetchone()
        return None if row is None else row[0]

    def status(self) -> dict[str, Any]:
        """The cluster as get_status shows it: module versions, members, and which of them lag.
        Bounded (a few seconds at most); UNAVAILABLE when the database cannot answer."""
        try:
            with self.connect(autocommit=True, bounded=True) as conn:
                versions = module_versions(conn)
                members = conn.execute(
                    "SELECT member_id, host, port, pid, versions, extract(epoch FROM now() - last_seen)::float8, "
                    "extract(epoch FROM started_at)::float8 FROM mcp_cluster_members ORDER BY member_id"
                ).fetchall()
        except self.database.errors as exc:  # a statement timeout, a shutdown in progress: the same answer
            raise Unavailable(f"the cluster database did not answer ({type(exc).__name__})") from exc
        self.contact.reached(versions)
        shown = []
        for member_id, host, port, pid, served, silent_s, started_at in members:
            behind = sorted(m for m, v in versions.items() if int(served.get(m, 0)) < v)
            stale = silent_s > STALE_AFTER_S
            shown.append(
                {
                    "member_id": member_id,
                    "host": host,
                    "port": port,
                    "pid": pid,
                    "versions": {m: int(v) for m, v in served.items()},
                    "last_seen_s": round(silent_s, 3),
                    "started_at": started_at,
                    "behind": behind,
                    "lagging": bool(behind) or stale,
                }
            )
        return {
            "reachable": True,
            "member_id": self.member_id,
            "versions": versions,
            "versions_as_of": self.contact.reached_at,
            "members": shown,
            "laggards": [m["member_id"] for m in shown if m["lagging"]],
        }

    def unreachable_status(self, error: str) -> dict[str, Any]:
        """get_status while the database cannot be reached: the versions last seen published and
        when, the members unknown (None)."""
        return {
            "reachable": False,
            "member_id": self.member_id,
            "error": error,
            "versions": dict(self.contact.versions) if self.contact.reached_at is not None else None,
            "versions_as_of": self.contact.reached_at,
            "members": None,
            "laggards": None,
        }


def ensure_schema(conn: ClusterConnection) -> None:
    ddl = sqlite.schema_section("cluster_postgres")
    with conn.transaction():
        # CREATE TABLE IF NOT EXISTS races with itself on a fresh database; serialise the instances.
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (JOIN_LOCK_KEY + 1,))
        conn.execute(ddl)


def module_versions(conn: ClusterConnection) -> dict[str, int]:
    return {m: int(v) for m, v in conn.execute("SELECT module, version FROM mcp_cluster_runtime").fetchall()}


def fetch_module(conn: ClusterConnection, module: str) -> ClusterModule | None:
    row = conn.execute(
        "SELECT version, memory_rows, runtime_rows FROM mcp_cluster_runtime WHERE module = %s", (module,)
    ).fetchone()
    return None if row is None else ClusterModule(module, int(row[0]), row[1], row[2])


class ClusterFollower:
    """One per worker, in a thread: LISTEN, compare versions on each notification and every
    POLL_S, apply what is newer through `apply(ClusterModule)`, heartbeat the member row.

    `applied()` returns the versions this instance serves (from its config.db); a module is
    applied by whichever worker of the instance gets there first (the store checks the version
    in the same SQLite transaction), and the others then find nothing to do.
    """

    def __init__(
        self,
        link: ClusterLink,
        *,
        applied: Callable[[], dict[str, int]],
        apply: Callable[[ClusterModule], bool],
        port: int,
    ) -> None:
        self.link = link
        self.applied = applied
        self.apply = apply
        self.port = port
        self.connected = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cluster-follower", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            try:
                self._follow()
                backoff = 0.2
            except Exception as exc:  # PostgreSQL restarting, network: retry; serving goes on meanwhile
                if self.connected:
                    log.warning("cluster database connection lost (%s); retrying", type(exc).__name__)
                self.connected = False
                self.link.contact.lose(f"the cluster database is unreachable ({type(exc).__name__})")
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)

    def _follow(self) -> None:
        with self.link.database.connect(
            self.link.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, application_name="mcp-gateway-follower"
        ) as conn:
            ensure_schema(conn)
            conn.execute(f"LISTEN {CHANNEL}")
            if not self.connected:
                log.info("following the cluster configuration as %s", self.link.member_id)
            self.connected = True
            self._catch_up(conn)  # whatever was announced while we were away
            self._heartbeat(conn)
            last_heartbeat = time.monotonic()
            while not self._stop.is_set():
                announced = False
                for _ in conn.notifies(timeout=POLL_S, stop_after=1):
                    announced = True
                self._catch_up(conn)
                if announced or time.monotonic() - last_heartbeat >= HEARTBEAT_S:
                    self._heartbeat(conn)
                    last_heartbeat = time.monotonic()

    def _catch_up(self, conn: ClusterConnection) -> None:
        served = self.applied()
        published = module_versions(conn)
        for module, version in published.items():
            if version > served.get(module, 0):
                fetched = fetch_module(conn, module)
                if fetched is not None and self.apply(fetched):
                    log.info("cluster: %s version %s applied", module, fetched.version)
        self.link.contact.reached(published)

    def _heartbeat(self, conn: ClusterConnection) -> None:
        conn.execute(
            "INSERT INTO mcp_cluster_members (member_id, host, port, pid, versions, started_at, last_seen) "
            "VALUES (%s, %s, %s, %s, %s, now(), now()) ON CONFLICT (member_id) DO UPDATE SET host = excluded.host, "
            "port = excluded.port, pid = excluded.pid, versions = excluded.versions, last_seen = now()",
            (self.link.member_id, socket.gethostname(), self.port, os.getpid(), self.link.database.json(self.applied())),
        )
