"""Direct access to the test databases for the backend-operation tests: make and drop accounts,
run a statement as another account, try SELECT and INSERT as a user. One class per engine."""

from __future__ import annotations

import contextlib
import threading
import uuid
from typing import Any

import psycopg
import pymysql


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


class Engine:
    protocol: str
    target_id: str = ""  # the target the tests configure for this engine (its superuser account)

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.made: list[str] = []

    # target/auth profile values for the admin tools
    def target(self, auth_profile_id: str) -> dict[str, Any]:
        raise NotImplementedError

    def can(self, username: str, password: str, statement: str) -> bool:
        """Whether `statement` succeeds when run as the user."""
        raise NotImplementedError

    def exists(self, username: str) -> bool:
        raise NotImplementedError

    def run_as_other(self, username: str, password: str, started: threading.Event) -> None:
        raise NotImplementedError

    def cancel_matching(self, marker: str) -> None:
        raise NotImplementedError


class Mariadb(Engine):
    protocol = "mysql"

    def root(self) -> pymysql.connections.Connection:
        return pymysql.connect(**self.settings, autocommit=True)

    def execute(self, sql: str, params: tuple = ()) -> list[tuple]:
        with contextlib.closing(self.root()) as conn, conn.cursor() as cur:
            cur.execute(sql, params or None)  # no params: no %-formatting of the statement
            return list(cur.fetchall())

    def target(self, auth_profile_id: str) -> dict[str, Any]:
        s = self.settings
        return {
            "protocol": "mysql",
            "host": s["host"],
            "port": s["port"],
            "database": s["database"],
            "auth_profile_id": auth_profile_id,
        }

    def account(self, name: str, password: str, *grants: str) -> None:
        self.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (name, password))
        self.made.append(name)
        for grant in grants:
            self.execute(grant.format(db=self.settings["database"], user=f"'{name}'@'%'"))

    def can(self, username: str, password: str, statement: str) -> bool:
        try:
            conn = pymysql.connect(
                host=self.settings["host"],
                port=self.settings["port"],
                user=username,
                password=password,
                database=self.settings["database"],
                autocommit=True,
            )
        except pymysql.err.OperationalError:
            return False
        with contextlib.closing(conn), conn.cursor() as cur:
            try:
                cur.execute(statement)
                return True
            except pymysql.err.MySQLError:
                return False

    def exists(self, username: str) -> bool:
        return bool(self.execute("SELECT 1 FROM mysql.user WHERE User = %s", (username,)))

    def run_as_other(self, username: str, password: str, started: threading.Event) -> None:
        conn = pymysql.connect(host=self.settings["host"], port=self.settings["port"], user=username, password=password)
        with contextlib.closing(conn), conn.cursor() as cur:
            started.set()
            with contextlib.suppress(pymysql.err.MySQLError):
                cur.execute("SELECT SLEEP(20)")

    def stop_other(self, username: str) -> None:
        for (pid,) in self.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = %s", (username,)):
            with contextlib.suppress(pymysql.err.MySQLError):
                self.execute(f"KILL {int(pid)}")

    def cancel_matching(self, marker: str) -> None:
        """Cancel any statement containing `marker` (a failed test must not leave a cross join running)."""
        for (pid,) in self.execute(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE %s AND ID <> CONNECTION_ID()", (f"%{marker}%",)
        ):
            with contextlib.suppress(pymysql.err.MySQLError):
                self.execute(f"KILL QUERY {int(pid)}")

    def drop(self, username: str) -> None:
        self.execute("DROP USER IF EXISTS %s@'%%'", (username,))


class Postgres(Engine):
    protocol = "pgsql"

    def root(self) -> psycopg.Connection:
        return psycopg.connect(**self.settings, autocommit=True)

    def execute(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self.root() as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def target(self, auth_profile_id: str) -> dict[str, Any]:
        s = self.settings
        return {
            "protocol": "pgsql",
            "host": s["host"],
            "port": s["port"],
            "database": s["dbname"],
            "auth_profile_id": auth_profile_id,
        }

    def account(self, name: str, password: str, *grants: str) -> None:
        self.execute(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}'")
        self.made.append(name)
        for grant in grants:
            self.execute(grant.format(db=self.settings["dbname"], user=f'"{name}"'))

    def can(self, username: str, password: str, statement: str) -> bool:
        try:
            conn = psycopg.connect(
                host=self.settings["host"],
                port=self.settings["port"],
                user=username,
                password=password,
                dbname=self.settings["dbname"],
                autocommit=True,
            )
        except psycopg.OperationalError:
            return False
        with conn:
            try:
                conn.execute(statement)
                return True
            except psycopg.Error:
                return False

    def exists(self, username: str) -> bool:
        return bool(self.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (username,)))

    def run_as_other(self, username: str, password: str, started: threading.Event) -> None:
        with psycopg.connect(
            host=self.settings["host"], port=self.settings["port"], user=username, dbname=self.settings["dbname"], autocommit=True
        ) as conn:
            started.set()
            with contextlib.suppress(psycopg.Error):
                conn.execute("SELECT pg_sleep(20)")

    def stop_other(self, username: str) -> None:
        self.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (username,))

    def cancel_matching(self, marker: str) -> None:
        self.execute(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE %s AND pid <> pg_backend_pid()",
            (f"%{marker}%",),
        )

    def drop(self, username: str) -> None:
        if self.exists(username):
            self.execute(f'DROP OWNED BY "{username}"')
            self.execute(f'DROP ROLE IF EXISTS "{username}"')
