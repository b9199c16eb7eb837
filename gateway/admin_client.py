"""`mcp-gateway admin`: through a running gateway's /mcp/admin, or on the data directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from gateway import audit, sqlite
from gateway.admin_sql import AdminSQL
from gateway.assembly import open_store
from gateway.pids import pid_alive
from gateway.tls import self_signed_paths


def _running(data_dir: Path) -> dict[str, Any] | None:
    state_file = data_dir / "gateway.json"
    if not state_file.exists():
        return None
    state = json.loads(state_file.read_text())
    return state if pid_alive(int(state["pid"])) else None


def run_admin_statement(data_dir: Path, statement: str) -> dict[str, Any]:
    if not (data_dir / "config.db").exists():
        raise FileNotFoundError(f"no gateway data directory at {data_dir}")
    store = open_store(data_dir)
    state = _running(data_dir)
    if state is None:
        result = AdminSQL(store).execute(statement, actor=audit.CLI_ACTOR)  # audited like the endpoint's
        result["via"] = f"data directory {data_dir} (no gateway running: LOAD ... TO RUNTIME takes effect at its next start)"
        return result
    tokens = (
        sqlite.scalar(
            store.conn(), "SELECT variable_value FROM runtime_global_variables WHERE variable_name = 'mcp-admin_endpoint_auth'"
        )
        or ""
    )
    token = tokens.split(",")[0].strip()
    scheme = "https" if state["use_ssl"] else "http"
    cert, _ = self_signed_paths(data_dir)
    runtime = store.read_runtime()
    verify: Any = str(cert) if not runtime.var("mcp-ssl_cert") and cert.exists() else True
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "admin.sql", "arguments": {"statement": statement}},
    }
    response = httpx.post(
        f"{scheme}://localhost:{state['port']}/mcp/admin",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        verify=verify,
        timeout=30,
    )
    payload = response.json()
    if "error" in payload:
        return {"error": payload["error"]}
    result = payload["result"]["structuredContent"]
    result["via"] = f"running gateway on port {state['port']} (data directory {data_dir})"
    return result
