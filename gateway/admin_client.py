"""`mcp-gateway admin`: through a running gateway's /mcp/admin, or on the data directory.

Against a running gateway it reads only what it needs from the data directory's config.db (the
admin token and the certificate setting, from the runtime tables) and posts the statement: no
handler, backend or driver is imported, so the command answers in a fraction of a second. The
data-directory path opens the whole config store (every declared variable and admin table)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway import sqlite
from gateway.pids import pid_alive


def _running(data_dir: Path) -> dict[str, Any] | None:
    state_file = data_dir / "gateway.json"
    if not state_file.exists():
        return None
    state = json.loads(state_file.read_text())
    return state if pid_alive(int(state["pid"])) else None


def _runtime_variables(data_dir: Path, *names: str) -> dict[str, str]:
    conn = sqlite.connect(data_dir / "config.db", readonly=True)
    try:
        marks = ", ".join("?" for _ in names)
        found = sqlite.rows(
            conn, f"SELECT variable_name, variable_value FROM runtime_global_variables WHERE variable_name IN ({marks})", names
        )
    finally:
        conn.close()
    return {row["variable_name"]: row["variable_value"] or "" for row in found}


def run_admin_statement(data_dir: Path, statement: str) -> dict[str, Any]:
    if not (data_dir / "config.db").exists():
        raise FileNotFoundError(f"no gateway data directory at {data_dir}")
    state = _running(data_dir)
    if state is None:
        from gateway import audit
        from gateway.admin_sql import AdminSQL
        from gateway.assembly import open_store

        result = AdminSQL(open_store(data_dir)).execute(statement, actor=audit.CLI_ACTOR)  # audited like the endpoint's
        result["via"] = f"data directory {data_dir} (no gateway running: LOAD ... TO RUNTIME takes effect at its next start)"
        return result
    return _through_gateway(data_dir, state, statement)


def _through_gateway(data_dir: Path, state: dict[str, Any], statement: str) -> dict[str, Any]:
    import ssl
    import urllib.error
    import urllib.request

    values = _runtime_variables(data_dir, "mcp-admin_endpoint_auth", "mcp-ssl_cert")
    token = values.get("mcp-admin_endpoint_auth", "").split(",")[0].strip()
    scheme = "https" if state["use_ssl"] else "http"
    context = None
    if state["use_ssl"]:
        cert = data_dir / "tls" / "cert.pem"  # the self-signed certificate (gateway.tls.self_signed_paths)
        context = ssl.create_default_context(cafile=str(cert) if not values.get("mcp-ssl_cert") and cert.exists() else None)
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "admin.sql", "arguments": {"statement": statement}},
    }
    request = urllib.request.Request(
        f"{scheme}://localhost:{state['port']}/mcp/admin",
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            payload = json.loads(response.read())
    except urllib.error.HTTPError as exc:  # a JSON-RPC error with an HTTP status (401, 400 ...)
        payload = json.loads(exc.read() or b"{}") or {"error": {"message": f"HTTP {exc.code}"}}
    if "error" in payload:
        return {"error": payload["error"]}
    result = payload["result"]["structuredContent"]
    result["via"] = f"running gateway on port {state['port']} (data directory {data_dir})"
    return result
