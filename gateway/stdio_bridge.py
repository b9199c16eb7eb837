"""`mcp-gateway stdio <endpoint>`: one endpoint over stdio, for MCP clients that launch a server
as a command (desktop apps, editors, agent frameworks) instead of speaking HTTP.

Each JSON-RPC message read from stdin (one per line, MCP's stdio transport) is posted to
`/mcp/<endpoint>` of a gateway and its answer written to stdout, one line each; nothing else is
ever written to stdout (logs go to stderr). The gateway is
- the running one: its data directory found as `mcp-gateway admin` finds it (--data-dir, else
  ./mcp-gateway-data, else the one running gateway's run file), its port in the directory's
  gateway.json;
- else one of its own: `mcp-gateway serve` on the same (existing) data directory, on a free
  loopback port, started as a child and stopped when stdin closes.
The bearer token is $MCP_GATEWAY_TOKEN when set, else the endpoint's first token in the data
directory's runtime (readable only by the user who runs the gateway).

Requests are answered concurrently (a long tool call does not hold up a ping or a cancellation);
answers may come in any order, as JSON-RPC allows. The protocol version the client settled on
(initialize's answer, or a message's `_meta` version) is sent as MCP-Protocol-Version.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import ssl
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

log = logging.getLogger("mcp_gateway.stdio")

META_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CONCURRENT_CALLS = 8
START_TIMEOUT_S = 60.0
TOKEN_ENV = "MCP_GATEWAY_TOKEN"


class BridgeError(Exception):
    """The bridge cannot start; the message says what to do."""


def _gateway_state(data_dir: Path) -> dict[str, Any] | None:
    from gateway.pids import pid_alive

    try:
        state = json.loads((data_dir / "gateway.json").read_text())
    except (OSError, ValueError):
        return None
    return state if pid_alive(int(state["pid"])) else None


def _token(data_dir: Path, endpoint: str) -> str:
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        return token
    from gateway import sqlite

    conn = sqlite.connect(data_dir / "config.db", readonly=True)
    try:
        value = sqlite.scalar(
            conn,
            "SELECT variable_value FROM runtime_global_variables WHERE variable_name = ?",
            (f"mcp-{endpoint}_endpoint_auth",),
        )
        known = sqlite.scalar(
            conn, "SELECT COUNT(*) FROM runtime_global_variables WHERE variable_name = ?", (f"mcp-{endpoint}_endpoint_auth",)
        )
    finally:
        conn.close()
    if not known:
        raise BridgeError(f"no endpoint /mcp/{endpoint} on the gateway of {data_dir}")
    token = (value or "").split(",")[0].strip()
    if not token:
        raise BridgeError(f"no token for /mcp/{endpoint} in {data_dir}: set {TOKEN_ENV}")
    return token


def _ssl_context(data_dir: Path, state: dict[str, Any]) -> ssl.SSLContext | None:
    if not state.get("use_ssl"):
        return None
    cert = data_dir / "tls" / "cert.pem"  # the self-signed certificate (gateway.tls.self_signed_paths)
    context = ssl.create_default_context(cafile=str(cert) if cert.exists() else None)
    if cert.exists():
        context.load_default_certs()  # a configured certificate signed by a public CA verifies too
    return context


class _OwnGateway:
    """`mcp-gateway serve` on the data directory, on a free loopback port, until stop()."""

    def __init__(self, data_dir: Path) -> None:
        command = [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(data_dir), "--port", "0",
                   "--host", "127.0.0.1", "--no-demo"]  # fmt: skip
        # its stdout (the banner, tokens included) reaches neither our stdout (the client's channel) nor a log
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sys.stderr)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            state = _gateway_state(data_dir)
            if state is not None and state["pid"] == self.process.pid and _healthy(data_dir, state):
                self.state = state
                return
            if self.process.poll() is not None:
                raise BridgeError(f"the gateway it started on {data_dir} exited with code {self.process.returncode}")
            if time.monotonic() > deadline:
                self.stop()
                raise BridgeError(f"the gateway it started on {data_dir} did not serve within {START_TIMEOUT_S:.0f} s")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


def _healthy(data_dir: Path, state: dict[str, Any]) -> bool:
    import httpx

    scheme = "https" if state.get("use_ssl") else "http"
    context = _ssl_context(data_dir, state)
    try:
        answer = httpx.get(f"{scheme}://localhost:{state['port']}/healthz", verify=context or True, timeout=2.0)
    except httpx.HTTPError:
        return False
    return answer.status_code == 200


class Bridge:
    def __init__(self, url: str, token: str, context: ssl.SSLContext | None, out: TextIO) -> None:
        import httpx

        self.url = url
        self.http = httpx.Client(
            verify=context if context is not None else True,
            timeout=httpx.Timeout(connect=10.0, read=None, write=30.0, pool=None),  # a tool call ends at its own deadline
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
        )
        self.out = out
        self.out_lock = threading.Lock()
        self.version: str | None = None  # settled by initialize
        self.session: str | None = None

    def write(self, message: Any) -> None:
        line = json.dumps(message, separators=(",", ":"))
        with self.out_lock:
            self.out.write(line + "\n")
            self.out.flush()

    def forward(self, line: str) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            self.write({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "not valid JSON"}})
            return
        first = message[0] if isinstance(message, list) and message else message
        request_id = first.get("id") if isinstance(first, dict) else None
        headers = {"Content-Type": "application/json"}
        meta_version = None
        if isinstance(first, dict) and isinstance(first.get("params"), dict):
            meta = first["params"].get("_meta")
            meta_version = meta.get(META_VERSION_KEY) if isinstance(meta, dict) else None
        if meta_version:
            headers.update({"MCP-Protocol-Version": str(meta_version), "Mcp-Method": str(first.get("method", ""))})
        elif self.version and not (isinstance(first, dict) and first.get("method") == "initialize"):
            headers["MCP-Protocol-Version"] = self.version
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        try:
            response = self.http.post(self.url, content=line.encode(), headers=headers)
        except Exception as exc:  # noqa: BLE001 - the gateway is gone or unreachable: the client gets an answer
            if request_id is not None:
                self.write(_error(request_id, -32603, f"the gateway could not be reached: {type(exc).__name__}: {exc}"))
            return
        self.session = response.headers.get("mcp-session-id") or self.session
        for answer in _answers(response):
            if isinstance(answer, dict) and answer.get("id") == request_id and isinstance(answer.get("result"), dict):
                settled = answer["result"].get("protocolVersion")
                if settled and isinstance(first, dict) and first.get("method") == "initialize":
                    self.version = str(settled)
            self.write(answer)
        if response.status_code >= 400 and not response.content and request_id is not None:
            self.write(_error(request_id, -32603, f"the gateway answered HTTP {response.status_code}"))

    def close(self) -> None:
        self.http.close()


def _error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _answers(response: Any) -> list[Any]:
    if not response.content:
        return []
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "text/event-stream":
        found = []
        for block in response.text.split("\n\n"):
            data = "\n".join(line[5:].lstrip() for line in block.splitlines() if line.startswith("data:"))
            if data:
                with contextlib.suppress(ValueError):
                    found.append(json.loads(data))
        return found
    try:
        body = response.json()
    except ValueError:
        return []
    return body if isinstance(body, list) else [body]


def serve_stdio(endpoint: str, data_dir: Path, *, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    """Bridge stdin/stdout to /mcp/<endpoint> until stdin closes; returns the exit code."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout  # the streams of the call, not of the import
    own = None
    state = _gateway_state(data_dir)
    if state is None:
        log.info("no gateway running on %s: starting one for this session", data_dir)
        own = _OwnGateway(data_dir)
        state = own.state
    try:
        token = _token(data_dir, endpoint)
        scheme = "https" if state.get("use_ssl") else "http"
        bridge = Bridge(f"{scheme}://localhost:{state['port']}/mcp/{endpoint}", token, _ssl_context(data_dir, state), stdout)
        with ThreadPoolExecutor(max_workers=CONCURRENT_CALLS, thread_name_prefix="stdio") as pool:
            for line in stdin:
                if line.strip():
                    pool.submit(bridge.forward, line.strip())
        bridge.close()
    finally:
        if own is not None:
            own.stop()
    return 0
