"""The admin command line as an operator meets it: run from anywhere, it finds the running gateway
or says exactly what to pass; it never creates a data directory; LOAD says what is wrong with a
target's account; the runtime shows what is served and where each value came from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_process import REPO_ROOT, GatewayProcess, call_tool, start_gateway


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, **(env or {})}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def shared() -> Iterator[tuple[GatewayProcess, Path]]:
    """One gateway for the tests that only need one, with its own $XDG_RUNTIME_DIR (run files)."""
    with tempfile.TemporaryDirectory(prefix="mcpgw-xdg-") as tmp, pytest.MonkeyPatch.context() as patch:
        runtime_dir = Path(tmp)
        patch.setenv("XDG_RUNTIME_DIR", str(runtime_dir))
        with start_gateway() as gateway:
            yield gateway, runtime_dir


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """An empty working directory that is not the gateway's."""
    path = tmp_path / "elsewhere"
    path.mkdir()
    return path


def test_admin_from_another_directory_finds_the_running_gateway(shared, elsewhere: Path) -> None:
    gateway, runtime_dir = shared
    statement = "SELECT variable_value FROM runtime_global_variables WHERE variable_name = 'mcp-port'"
    answer = run_cli("admin", statement, cwd=elsewhere, env={"XDG_RUNTIME_DIR": str(runtime_dir)})
    assert answer.returncode == 0, answer.stderr
    result = json.loads(answer.stdout)
    assert result["rows"] == [[gateway.base_url.rsplit(":", 1)[1]]], result
    assert "running gateway" in result["via"] and str(gateway.data_dir) in result["via"], result
    assert list(elsewhere.iterdir()) == []  # nothing created where the CLI ran


def test_the_run_file_names_the_gateway(shared) -> None:
    gateway, runtime_dir = shared
    files = list((runtime_dir / "mcp-gateway").glob("*.json"))
    assert len(files) == 1, files
    state = json.loads(files[0].read_text())
    assert state["data_dir"] == str(gateway.data_dir) and state["pid"] == gateway.process.pid
    assert state["port"] == int(gateway.base_url.rsplit(":", 1)[1])
    assert oct(files[0].stat().st_mode & 0o777) == "0o600"


def test_with_two_running_gateways_it_asks_which_and_a_stopped_one_leaves(shared, elsewhere: Path) -> None:
    first, runtime_dir = shared
    env = {"XDG_RUNTIME_DIR": str(runtime_dir)}
    with start_gateway() as second:
        answer = run_cli("admin", "SELECT 1", cwd=elsewhere, env=env)
        assert answer.returncode == 1
        assert f"--data-dir {first.data_dir}" in answer.stderr and f"--data-dir {second.data_dir}" in answer.stderr, answer.stderr
        chosen = run_cli("admin", "SELECT 1", "--data-dir", str(second.data_dir), cwd=elsewhere, env=env)
        assert chosen.returncode == 0, chosen.stderr
        assert len(list((runtime_dir / "mcp-gateway").glob("*.json"))) == 2
    assert len(list((runtime_dir / "mcp-gateway").glob("*.json"))) == 1  # the stopped one removed its run file


def test_without_a_gateway_commands_say_which_data_dir_to_pass_and_create_none(tmp_path: Path, elsewhere: Path) -> None:
    env = {"XDG_RUNTIME_DIR": str(tmp_path)}  # no run files there: no gateway running
    # rag sync used to create ./mcp-gateway-data and sync nothing; admin said only "no ... at ./mcp-gateway-data".
    answer = run_cli("rag", "sync", "--quiet", cwd=elsewhere, env=env)
    assert answer.returncode != 0
    assert "--data-dir" in answer.stderr and "mcp-gateway-data" in answer.stderr, answer.stderr
    assert "no running gateway" in answer.stderr, answer.stderr
    assert list(elsewhere.iterdir()) == [], list(elsewhere.iterdir())
    missing = elsewhere / "given"
    answer = run_cli("admin", "LOAD MCP VARIABLES TO RUNTIME", "--data-dir", str(missing), cwd=elsewhere, env=env)
    assert answer.returncode != 0 and not missing.exists(), answer.stderr
    assert f"no gateway data directory at {missing}" in answer.stderr and "--data-dir" in answer.stderr, answer.stderr


# -- LOAD warns ------------------------------------------------------------------------------------


def test_load_profiles_prints_the_privilege_warnings(shared, mariadb_db: dict) -> None:
    gateway, _ = shared
    statements = [
        "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('root', 'root', '')",
        "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id) "
        f"VALUES ('shop', 'mysql', '127.0.0.1', {mariadb_db['port']}, '{mariadb_db['database']}', 'root')",
    ]
    with gateway.client() as http:
        for statement in statements:
            assert call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})["isError"] is False
        # Over the admin endpoint: the answer carries the warnings, per target.
        result = call_tool(http, gateway, "admin", "admin.sql", {"statement": "LOAD MCP PROFILES TO RUNTIME"})
    answer = result["structuredContent"]
    assert answer["ok"] is True and "warning" in answer["message"].lower(), answer
    warnings = answer["warnings"]
    assert any(w.startswith("target shop: ") and "ALL PRIVILEGES" in w for w in warnings), warnings
    # And through the command line, which prints the same answer.
    cli = run_cli("admin", "LOAD MCP PROFILES TO RUNTIME", "--data-dir", str(gateway.data_dir), cwd=gateway.data_dir.parent)
    assert cli.returncode == 0, cli.stderr
    assert "ALL PRIVILEGES" in cli.stdout, cli.stdout
    # And in the gateway's log.
    deadline = time.monotonic() + 5
    while "ALL PRIVILEGES" not in gateway.log_tail(20000) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "target shop" in gateway.log_tail(20000) and "ALL PRIVILEGES" in gateway.log_tail(20000)


# -- what is served, and why ----------------------------------------------------------------------


def test_runtime_shows_the_served_values_and_their_origin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_GATEWAY_MCP_TOOLS_PAGE_SIZE", "7")
    # The bootstrap file says port 6071; --port (a free one) is what is served.
    with start_gateway(variables={"mcp-port": 6071, "mcp-timeout_ms": 4321}) as gateway, gateway.client() as http:
        port = int(gateway.base_url.rsplit(":", 1)[1])
        statement = "SELECT variable_name, variable_value, origin FROM runtime_global_variables ORDER BY variable_name"
        result = call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})["structuredContent"]
        rows = {name: (value, origin) for name, value, origin in result["rows"]}
        assert rows["mcp-port"] == (str(port), "command line"), rows["mcp-port"]
        assert rows["mcp-bind_address"] == ("127.0.0.1", "command line")
        assert rows["mcp-tools_page_size"] == ("7", "environment")
        assert rows["mcp-timeout_ms"] == ("4321", "disk")
        assert rows["mcp-stats_show_queries_max_rows"][1] == "default"
        assert rows["mcp-config_endpoint_auth"] == ("********", "disk")  # still masked

        # An admin's edit, loaded but not saved, says so; saved, it is the disk's.
        def timeout_view(until: tuple[str, str]) -> dict:
            deadline = time.monotonic() + 5  # the worker follows a LOAD within a second
            while True:
                view = call_tool(http, gateway, "config", "get_config", {"variable_name": "mcp-timeout_ms"})["structuredContent"]
                if (view["value"], view["origin"]) == until or time.monotonic() > deadline:
                    return view
                time.sleep(0.1)

        for statement in ("SET mcp-timeout_ms = 5000", "LOAD MCP VARIABLES TO RUNTIME"):
            call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})
        view = timeout_view(("5000", "memory"))
        assert (view["value"], view["origin"]) == ("5000", "memory"), view
        # Saved, it is the disk's (the origin is worked out when a runtime is read: LOAD again).
        for statement in ("SAVE MCP VARIABLES TO DISK", "LOAD MCP VARIABLES TO RUNTIME"):
            call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})
        view = timeout_view(("5000", "disk"))
        assert (view["value"], view["origin"]) == ("5000", "disk"), view
        view = call_tool(http, gateway, "config", "get_config", {"variable_name": "mcp-port"})["structuredContent"]
        assert (view["value"], view["origin"]) == (str(port), "command line"), view
