"""Backend operations on real MariaDB and PostgreSQL through /mcp/admin: kill a long
statement started through run_sql_readonly, refuse another account's, create a read-only user
(checked by connecting as it), grant from the allowlist, and refuse cleanly — nothing half
done — when the target's account lacks the rights. No password in the audit table or log."""

from __future__ import annotations

import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from server_process import GatewayProcess, start_gateway

from admin.engine_accounts import Engine, Mariadb, Postgres, unique
from admin.support import audit_table_text, error_of, ok, tool

ROWS = 1000  # a three-way cross join: 10^9 rows, far longer than any test waits
PASSWORDS: list[str] = []  # every password the tests use: none may reach the audit table or the log


@pytest.fixture(scope="module")
def gateway() -> Iterator[GatewayProcess]:
    with start_gateway() as gateway:
        yield gateway
        stored = audit_table_text(gateway.data_dir)
        logged = gateway.log_path.read_text(errors="replace")
        leaked = [p for p in PASSWORDS if p in stored or p in logged]
        assert not leaked, "a password reached the audit table or the gateway log"


@pytest.fixture(scope="module", params=["mysql", "pgsql"])
def engine(request: pytest.FixtureRequest, gateway: GatewayProcess) -> Iterator[Engine]:
    if request.param == "mysql":
        engine: Engine = Mariadb(request.getfixturevalue("mariadb_db"))
        engine.execute("CREATE TABLE big (n INT PRIMARY KEY)")
        engine.execute("INSERT INTO big SELECT seq FROM seq_1_to_1000")
    else:
        engine = Postgres(request.getfixturevalue("postgres_db"))
        engine.execute("CREATE TABLE big (n int PRIMARY KEY)")
        engine.execute(f"INSERT INTO big SELECT generate_series(1, {ROWS})")
    engine.target_id = configure_target(gateway, engine, "root", engine.settings["user"], engine.settings.get("password", ""))
    try:
        yield engine
    finally:
        for name in engine.made:
            engine.stop_other(name)
            engine.drop(name)


def configure_target(gateway: GatewayProcess, engine: Engine, label: str, username: str, password: str, **target: Any) -> str:
    target_id = f"{label}_{engine.protocol}_{uuid.uuid4().hex[:6]}"
    with gateway.client() as http:
        ok(
            http,
            gateway,
            "admin",
            "admin.upsert_auth_profile",
            {"auth_profile_id": target_id, "db_username": username, "db_password": password},
        )
        ok(
            http,
            gateway,
            "admin",
            "admin.upsert_target_profile",
            {"target_id": target_id, **engine.target(target_id), "timeout_ms": 60000, **target},
        )
        ok(http, gateway, "admin", "admin.load_to_runtime", {"module": "profiles"})
    return target_id


def test_kill_a_long_statement_started_through_run_sql_readonly(gateway: GatewayProcess, engine: Engine) -> None:
    marker = f"kill_me_{uuid.uuid4().hex[:8]}"
    sql = f"SELECT COUNT(*) AS {marker} FROM big a CROSS JOIN big b CROSS JOIN big c"
    outcome: dict[str, Any] = {}

    def long_call() -> None:
        with gateway.client(timeout=60) as http:
            outcome["result"] = tool(
                http, gateway, "query", "run_sql_readonly", {"sql": sql, "target_id": engine.target_id, "timeout_sec": 60}
            )
            outcome["ended"] = time.monotonic()

    caller = threading.Thread(target=long_call)
    caller.start()
    try:
        with gateway.client() as http:
            running = None
            for _ in range(100):
                listed = ok(http, gateway, "admin", "admin_show_processes", {"target_id": engine.target_id})["processes"]
                running = next((p for p in listed if marker in p["statement"]), None)
                if running:
                    break
                time.sleep(0.05)
            assert running is not None and running["gateway_account"] is True
            killed_at = time.monotonic()
            killed = ok(
                http, gateway, "admin", "admin_kill_query", {"target_id": engine.target_id, "process_id": running["process_id"]}
            )
            assert killed["killed"] is True and marker in killed["statement"]
            caller.join(timeout=5)
            assert not caller.is_alive()
            seconds = outcome["ended"] - killed_at
            print(f"{engine.protocol}: run_sql_readonly ended {seconds:.3f} s after admin_kill_query was sent")
            assert seconds < 2.0, seconds  # the issue asks for a second; the margin is for a loaded CI machine
            # Stopped by an administrator: said so, not a timeout (PostgreSQL) nor the caller's
            # mistake (MariaDB's 1317 had read as INVALID_ARGUMENT).
            assert outcome["result"]["error"]["code"] == "CANCELLED", outcome["result"]
            # The pooled connection survived the kill: the target still answers.
            ok(
                http,
                gateway,
                "query",
                "run_sql_readonly",
                {"sql": "SELECT COUNT(*) AS n FROM big", "target_id": engine.target_id},
            )
            gone = error_of(
                http, gateway, "admin", "admin_kill_query", {"target_id": engine.target_id, "process_id": running["process_id"]}
            )
            assert gone["code"] == "NOT_FOUND"
    finally:
        engine.cancel_matching(marker)
        caller.join(timeout=30)


def test_another_accounts_statement_is_not_killed(gateway: GatewayProcess, engine: Engine) -> None:
    other, password = unique("other"), f"Pw-{uuid.uuid4().hex}"
    PASSWORDS.append(password)
    engine.account(other, password)
    started = threading.Event()
    runner = threading.Thread(target=engine.run_as_other, args=(other, password, started))
    runner.start()
    try:
        assert started.wait(10)
        with gateway.client() as http:
            found = None
            for _ in range(100):
                listed = ok(http, gateway, "admin", "admin_show_processes", {"target_id": engine.target_id, "all": True})[
                    "processes"
                ]
                found = next((p for p in listed if p["user"] == other), None)
                if found:
                    break
                time.sleep(0.05)
            assert found is not None and found["gateway_account"] is False
            mine_only = ok(http, gateway, "admin", "admin_show_processes", {"target_id": engine.target_id})["processes"]
            assert all(p["user"] != other for p in mine_only)
            refused = error_of(
                http, gateway, "admin", "admin_kill_query", {"target_id": engine.target_id, "process_id": found["process_id"]}
            )
            assert refused["code"] == "PERMISSION_DENIED" and "admin-allow_kill_any" in refused["message"]
            audit = ok(http, gateway, "admin", "admin.audit", {"action": "admin_kill_query", "limit": 1})["rows"][0]
            assert audit["outcome"] == "PERMISSION_DENIED" and audit["before"]["user"] == other
        assert runner.is_alive()  # still sleeping: nothing was killed
    finally:
        engine.stop_other(other)
        runner.join(timeout=30)


def test_create_a_read_only_user_then_grant_insert(gateway: GatewayProcess, engine: Engine) -> None:
    name = unique("u")
    engine.made.append(name)
    with gateway.client() as http:
        created = ok(http, gateway, "admin", "admin_create_user", {"target_id": engine.target_id, "username": name})
        password = created["password"]
        PASSWORDS.append(password)
        assert password and len(password) >= 20 and created["granted"]
        assert engine.can(name, password, "SELECT COUNT(*) FROM big")
        assert not engine.can(name, password, "INSERT INTO big VALUES (1000001)")
        listed = ok(http, gateway, "admin", "admin_list_users", {"target_id": engine.target_id})["users"]
        assert any(u["username"] == name and u["can_login"] and not u["gateway_account"] for u in listed)
        again = error_of(
            http,
            gateway,
            "admin",
            "admin_create_user",
            {"target_id": engine.target_id, "username": name, "password": "another-long-password"},
        )
        assert again["code"] == "INVALID_ARGUMENT" and "exists" in again["message"]

        granted = ok(
            http,
            gateway,
            "admin",
            "admin_grant_permissions",
            {"target_id": engine.target_id, "username": name, "privileges": ["insert"], "on": "*"},
        )
        assert granted["privileges"] == ["INSERT"]
        assert engine.can(name, password, "INSERT INTO big VALUES (1000001)")
        for privilege in ("SUPER", "FILE") if engine.protocol == "mysql" else ("SUPERUSER", "pg_read_server_files"):
            refused = error_of(
                http,
                gateway,
                "admin",
                "admin_grant_permissions",
                {"target_id": engine.target_id, "username": name, "privileges": [privilege], "on": "*"},
            )
            assert refused["code"] == "PERMISSION_DENIED" and "admin-allow_privileged_grants" in refused["message"]
        unknown = error_of(
            http,
            gateway,
            "admin",
            "admin_grant_permissions",
            {"target_id": engine.target_id, "username": name, "privileges": ["SELECT; DROP"], "on": "*"},
        )
        assert unknown["code"] == "INVALID_ARGUMENT"
        given = f"Given-{uuid.uuid4().hex}"
        PASSWORDS.append(given)
        second = unique("u")
        engine.made.append(second)
        created = ok(
            http, gateway, "admin", "admin_create_user", {"target_id": engine.target_id, "username": second, "password": given}
        )
        assert created["password"] is None and engine.can(second, given, "SELECT 1 FROM big LIMIT 1")
        actions = [(r["action"], r["outcome"]) for r in ok(http, gateway, "admin", "admin.audit", {"limit": 20})["rows"]]
    assert ("admin_create_user", "ok") in actions and ("admin_grant_permissions", "ok") in actions
    assert ("admin_grant_permissions", "PERMISSION_DENIED") in actions


def test_missing_rights_are_named_and_nothing_is_half_done(gateway: GatewayProcess, engine: Engine) -> None:
    limited, half = unique("lim"), unique("half")
    password = f"Lim-{uuid.uuid4().hex}"
    PASSWORDS.append(password)
    if engine.protocol == "mysql":
        engine.account(limited, password, "GRANT SELECT ON `{db}`.* TO {user}")
        engine.account(half, password, "GRANT SELECT ON `{db}`.* TO {user}", "GRANT CREATE USER ON *.* TO {user}")
        lacking = "CREATE USER"
    else:
        engine.account(limited, password, "GRANT SELECT ON big TO {user}")
        engine.account(half, password, "ALTER ROLE {user} CREATEROLE", "GRANT SELECT ON big TO {user}")
        lacking = "CREATEROLE"
    limited_target = configure_target(gateway, engine, "lim", limited, password)
    half_target = configure_target(gateway, engine, "half", half, password)
    with gateway.client() as http:
        name = unique("u")
        engine.made.append(name)
        refused = error_of(http, gateway, "admin", "admin_create_user", {"target_id": limited_target, "username": name})
        assert refused["code"] == "PERMISSION_DENIED" and lacking in refused["message"], refused
        assert not engine.exists(name)
        # The account may create users but not grant SELECT: the user must not be left behind.
        refused = error_of(http, gateway, "admin", "admin_create_user", {"target_id": half_target, "username": name})
        assert refused["code"] == "PERMISSION_DENIED" and "SELECT" in refused["message"], refused
        assert not engine.exists(name)
        denied = error_of(
            http,
            gateway,
            "admin",
            "admin_grant_permissions",
            {"target_id": limited_target, "username": limited, "privileges": ["INSERT"], "on": "*"},
        )
        assert denied["code"] == "PERMISSION_DENIED"
        assert not engine.can(limited, password, "INSERT INTO big VALUES (1000002)")


def test_sqlite_targets_have_no_accounts(gateway: GatewayProcess) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "local.db"
        import sqlite3

        sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.commit()
        with gateway.client() as http:
            ok(
                http,
                gateway,
                "admin",
                "admin.upsert_target_profile",
                {"target_id": "local_sqlite", "protocol": "sqlite", "database": str(path)},
            )
            ok(http, gateway, "admin", "admin.load_to_runtime", {"module": "profiles"})
            for name, extra in (("admin_list_users", {}), ("admin_show_processes", {}), ("admin_kill_query", {"process_id": 1})):
                error = error_of(http, gateway, "admin", name, {"target_id": "local_sqlite", **extra})
                assert error["code"] == "INVALID_ARGUMENT" and "not supported by sqlite" in error["message"]
            missing = error_of(http, gateway, "admin", "admin_list_users", {"target_id": "no_such_target"})
            assert missing["code"] == "NOT_FOUND"
