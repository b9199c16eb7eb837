"""A new user's first start (issue 29, items 1 and 9): a first start that fails on a busy port says
which port and what to pass, and does not lose the generated tokens: the next start that serves
shows them (and they work); a later start shows none. `admin.list_tokens` knows when they were made."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from server_process import REPO_ROOT, free_port


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "XDG_RUNTIME_DIR": str(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    return env


def _serve(tmp_path: Path, data_dir: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(data_dir), "--host", "127.0.0.1",
            "--port", str(port), "--no-demo"]  # fmt: skip


def _serve_until_banner(tmp_path: Path, data_dir: Path, port: int) -> tuple[subprocess.Popen[str], str]:
    """Start a gateway; once /healthz answers, what it printed on stdout (the banner)."""
    process = subprocess.Popen(
        _serve(tmp_path, data_dir, port), cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True, start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True).start()  # type: ignore[arg-type]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if (
                httpx.get(f"https://127.0.0.1:{port}/healthz", verify=str(data_dir / "tls" / "cert.pem"), timeout=2).status_code
                == 200
            ):
                break
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(0.2)
    time.sleep(0.3)
    return process, "".join(lines)


def _stop(process: subprocess.Popen[str]) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=15)


def _tokens(banner: str) -> dict[str, str]:
    return dict(re.findall(r"^  (config|query|rag|stats|admin|cache|ai)\s+(\S{20,})$", banner, re.MULTILINE))


def _tools_list(port: int, data_dir: Path, endpoint: str, token: str) -> int:
    response = httpx.post(
        f"https://127.0.0.1:{port}/mcp/{endpoint}",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": f"Bearer {token}", "MCP-Protocol-Version": "2025-06-18"},
        verify=str(data_dir / "tls" / "cert.pem"),
        timeout=10,
    )
    return response.status_code


@pytest.mark.slow
def test_a_busy_port_on_first_start_names_the_port_and_keeps_the_tokens(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        failed = subprocess.run(
            _serve(tmp_path, data_dir, taken), cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=60
        )
    assert failed.returncode == 3, failed.stderr
    assert f"127.0.0.1:{taken}" in failed.stderr and "--port" in failed.stderr, failed.stderr
    assert "next start" in failed.stderr and "Traceback" not in failed.stderr, failed.stderr
    assert "Generated bearer tokens" not in failed.stdout  # nothing shown that a user would take for a working gateway

    port = free_port()
    process, banner = _serve_until_banner(tmp_path, data_dir, port)
    try:
        tokens = _tokens(banner)
        assert set(tokens) == {"config", "query", "rag", "stats", "admin", "cache", "ai"}, banner
        assert "curl" in banner and f":{port}/mcp/" in banner, banner
        assert _tools_list(port, data_dir, "query", tokens["query"]) == 200
        assert _tools_list(port, data_dir, "query", "not-the-token") == 401
        # item 9: the first start's tokens have a creation time
        listed = httpx.post(
            f"https://127.0.0.1:{port}/mcp/admin",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "admin.list_tokens", "arguments": {}}},
            headers={"Authorization": f"Bearer {tokens['admin']}", "MCP-Protocol-Version": "2025-06-18"},
            verify=str(data_dir / "tls" / "cert.pem"),
            timeout=10,
        ).json()["result"]["structuredContent"]
        text = json.dumps(listed)
        assert '"created_at": null' not in text and "first start" in text, text
    finally:
        _stop(process)
    assert not list(data_dir.glob("unshown-tokens*")), "shown once: the kept copy is gone"

    process, banner = _serve_until_banner(tmp_path, data_dir, free_port())
    try:
        assert "MCP Gateway listening" in banner and _tokens(banner) == {}, banner
    finally:
        _stop(process)
