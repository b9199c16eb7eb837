"""Account and process administration (the admin_* backend tools, handlers/admin/backend_ops.py):
what an engine provides for it (`TargetAdmin`, from `Engine.admin(target)`) and the engine-neutral
pieces its implementations share.

An administration session is short-lived, opened by the engine with the target's own credentials,
without the read-only settings of the query path (these statements write, by design) and with a
STATEMENT_TIMEOUT_MS statement timeout; it never comes from the pool. Nothing is left half-done.
Driver errors are translated by the engine's own admin table: a permission error names the
privilege the target's account lacks; other driver messages are not passed on (they may quote
the statement, password included), only their code.

This module imports no driver and no other engine module (backends/engines/base.py imports it).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.errors import InvalidArgument, Unavailable

STATEMENT_TIMEOUT_MS = 10_000
CONNECT_TIMEOUT_S = 5.0
STATEMENT_CHARS = 2000  # a listed statement is cut here
KILL_RESEND_S = 0.25  # a statement still running this long after a cancel gets another
KILL_WAIT_S = 3.0
# What show_processes needs on either engine (one text: the tools answered it before the engines split).
PROCESS_NEEDS = "PROCESS (MariaDB) or pg_read_all_stats (PostgreSQL)"


@dataclass(frozen=True)
class Process:
    process_id: int
    user: str
    host: str
    database: str
    state: str
    time_s: float
    statement: str
    started_at: float  # unix time its run began (PostgreSQL: its transaction, which a pipeline's steps share)
    label: str = ""  # PostgreSQL's application_name (the gateway's names its OAuth caller: backends/callers.py)


@dataclass(frozen=True)
class Account:
    username: str
    host: str
    can_login: bool
    attributes: list[str]


@dataclass(frozen=True)
class Privileges:
    """The grant allowlist of an engine, in upper case with single spaces."""

    table_level: frozenset[str]  # granted on a database/schema or a table
    privileged: frozenset[str]  # only with admin-allow_privileged_grants
    role_level: frozenset[str]  # not per table: ON *.* (MariaDB), role attributes or roles (PostgreSQL)

    @property
    def known(self) -> frozenset[str]:
        return self.table_level | self.privileged


class AdminSession(Protocol):
    """One open administration session on a target."""

    def processes(self) -> list[Process]:
        """Statements running now (idle sessions and this one left out), as far as the account may see."""
        ...

    def process(self, process_id: int) -> Process | None: ...

    def kill_query(self, running: Process) -> None:
        """Cancel the statement the process runs (its connection stays open); return once it has stopped."""
        ...

    def accounts(self) -> list[Account]: ...

    def create_user(self, *, username: str, password: str, host: str, read_only: bool) -> list[str]:
        """Create a login; with read_only, grant it SELECT on the target's database or default
        schema. Returns what was granted. The password is sent as the server stores it."""
        ...

    def grant(self, *, username: str, host: str, privileges: list[str], on: str, role_privileges: list[str]) -> str:
        """Grant table-level privileges on `on` ('*', 's.*', 's.t', '*.*') and role-level ones
        (already allowed by the caller). Returns the scope granted on, as the engine names it."""
        ...


class TargetAdmin(Protocol):
    """An engine's administration of one target (Engine.admin(target))."""

    privileges: Privileges
    accounts_have_hosts: bool  # an account is user@host (MariaDB/MySQL)

    def session(self) -> contextlib.AbstractContextManager[AdminSession]:
        """A writable session as the target's auth profile's account; UNAVAILABLE when it cannot connect."""
        ...


def not_supported(target_id: str, engine_title: str, engine_name: str) -> InvalidArgument:
    """The answer of an engine without accounts or processes (a local file)."""
    return InvalidArgument(f"target {target_id!r} is {engine_title}: accounts and processes are not supported by {engine_name}")


@contextlib.contextmanager
def opened(target_id: str, connect: Callable[[], Any], errors: tuple[type[Exception], ...]) -> Iterator[Any]:
    """A connection from `connect`, closed afterwards; a failure to connect is UNAVAILABLE."""
    try:
        conn = connect()
    except (*errors, OSError) as exc:
        raise Unavailable(f"cannot connect to target {target_id!r} as its auth profile's account ({type(exc).__name__})") from exc
    try:
        yield conn
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def cancel_until_stopped(running: Process, *, cancel: Callable[[], bool], still_running: Callable[[], bool]) -> None:
    """Send a cancel (`cancel` answers False when the process is gone) and return once the
    statement has stopped. A cancel that lands between protocol messages (PostgreSQL reads the next
    one of a pipeline) is dropped by the server, so it is sent again until the statement is gone."""
    deadline = time.monotonic() + KILL_WAIT_S
    while True:
        if not cancel():
            return
        resend = time.monotonic() + KILL_RESEND_S
        while time.monotonic() < resend:
            if not still_running():
                return
            time.sleep(0.02)
        if time.monotonic() > deadline:
            raise Unavailable(f"process {running.process_id} still runs its statement {KILL_WAIT_S:.0f} s after the kill")


def scrubbed(text: str, secrets: tuple[str, ...]) -> str:
    """A driver message with the given secrets masked."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "********")
    return text
