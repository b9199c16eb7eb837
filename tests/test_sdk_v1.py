"""The official MCP Python SDK 1.x client (the series most deployed agents run) against the gateway.

1.x and 2.x cannot share an environment, so tests/sdk_v1_client.py runs under a second
virtualenv's interpreter: env MCP1_PYTHON, default <repo>/.venv-mcp1/bin/python. When the default
one is missing the test creates it (`python -m venv .venv-mcp1 && pip install "mcp<2"`, about 30 s
once), so the README's single test command covers both SDK series. If it cannot be made (no
registry), the test fails under CI=true and skips elsewhere.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from server_process import GatewayProcess

HERE = Path(__file__).resolve().parent
DEFAULT_MCP1_PYTHON = HERE.parent / ".venv-mcp1" / "bin" / "python"
CONFIG_TOOLS = {"get_config", "set_config", "list_variables", "reload_config", "get_status"}
STATS_TOOLS = {"list_stats", "get_stats", "get_health", "show_metrics", "show_tool_usage", "show_queries", "show_connections"}


def _mcp1_python() -> Path:
    location = os.environ.get("MCP1_PYTHON", str(DEFAULT_MCP1_PYTHON))
    if location == str(DEFAULT_MCP1_PYTHON) and not DEFAULT_MCP1_PYTHON.exists():
        _create_default_env()
    path, problem = _probe_mcp1(location)
    if problem:
        message = f"the MCP SDK 1.x interpreter is missing ({problem}); create it with: python -m venv .venv-mcp1 && .venv-mcp1/bin/pip install 'mcp<2'"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@functools.cache
def _create_default_env() -> None:
    env_dir = DEFAULT_MCP1_PYTHON.parent.parent
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=False, capture_output=True, timeout=120)
    subprocess.run(
        [str(DEFAULT_MCP1_PYTHON), "-m", "pip", "install", "-q", "mcp<2"], check=False, capture_output=True, timeout=600
    )


@functools.cache
def _probe_mcp1(location: str) -> tuple[Path, str]:
    path = Path(location)
    problem = ""
    if not path.exists():
        problem = f"{path} does not exist"
    else:
        probe = subprocess.run(
            [str(path), "-c", "import mcp, importlib.metadata as m; print(m.version('mcp'))"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if probe.returncode != 0:
            problem = f"{path} cannot import mcp: {probe.stderr.strip()[-300:]}"
        elif not probe.stdout.startswith("1."):
            problem = f"{path} has mcp {probe.stdout.strip()}, not a 1.x release"
    return path, problem


def _run_client(gateway: GatewayProcess, *args: str) -> dict:
    command = [
        str(_mcp1_python()),
        str(HERE / "sdk_v1_client.py"),
        "--base-url",
        gateway.base_url,
        "--ca",
        str(gateway.ca_path),
        *args,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.slow
def test_sdk_v1_client_on_config_and_stats(gateway_server: GatewayProcess) -> None:
    report = _run_client(
        gateway_server,
        "--endpoint", f"config={gateway_server.tokens['config']}",
        "--endpoint", f"stats={gateway_server.tokens['stats']}",
        "--endpoint", f"admin={gateway_server.tokens['admin']}",
        "--call", 'config=get_config:{"variable_name": "mcp-timeout_ms"}',
        "--call", "config=get_status:{}",
        "--call", "stats=get_health:{}",
        "--call", "stats=list_stats:{}",
        "--call", "admin=admin_sql:{\"statement\": \"SELECT variable_name FROM global_variables WHERE variable_name = 'mcp-port'\"}",
    )  # fmt: skip
    assert report["sdk_version"].startswith("1.")
    endpoints = report["endpoints"]
    for name, session in endpoints.items():
        assert "error" not in session, (name, session["error"])
        assert session["protocol_version"] == "2025-11-25"  # 1.x's newest, which the gateway supports
        assert session["ping"] == "ok"
        for call in session["calls"]:
            assert call["is_error"] is False, (name, call)
    assert set(endpoints["config"]["tools"]) >= CONFIG_TOOLS
    assert set(endpoints["stats"]["tools"]) >= STATS_TOOLS
    get_config = endpoints["config"]["calls"][0]["structured"]
    assert get_config["variable_name"] == "mcp-timeout_ms" and get_config["value"] == "30000"


def test_sdk_v1_client_with_another_endpoints_token_is_refused(gateway_server: GatewayProcess) -> None:
    report = _run_client(gateway_server, "--endpoint", f"config={gateway_server.tokens['stats']}")
    error = report["endpoints"]["config"].get("error", "")
    assert error, report
    assert "401 Unauthorized" in error, error
