"""Start a real gateway as a subprocess, the way an operator does, and stop it again.

`start_gateway()` writes a TOML bootstrap with explicit tokens into a temporary data
directory, runs `python -m gateway.cli serve` on a free port (HTTPS with the self-signed
certificate the gateway generates), waits until /healthz answers 200 and yields a
`GatewayProcess` telling a test where and how to talk to it. Used by the `gateway_server`
fixture, by the end-to-end tests and by bench/gateway_overhead.py.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
ENDPOINTS = ("config", "query", "admin", "cache", "stats", "ai", "rag")


@dataclass
class GatewayProcess:
    base_url: str  # https://127.0.0.1:PORT
    tokens: dict[str, str]  # endpoint -> its (first) bearer token
    ca_path: Path  # the self-signed certificate: pass as verify= to a client
    data_dir: Path
    config_path: Path
    log_path: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    def url(self, endpoint: str) -> str:
        return f"{self.base_url}/mcp/{endpoint}"

    def auth(self, endpoint: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[endpoint]}"}

    def client(self, **kwargs: Any) -> httpx.Client:
        """An httpx client trusting the gateway's certificate (keep-alive, 10 s timeout)."""
        kwargs.setdefault("timeout", 10.0)
        return httpx.Client(base_url=self.base_url, verify=self.ssl_context(), **kwargs)

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_path))

    def log_tail(self, max_bytes: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-max_bytes:].decode("utf-8", "replace")
        except OSError:
            return ""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def default_tokens() -> dict[str, str]:
    return {endpoint: f"tok-{endpoint}-{secrets.token_hex(12)}" for endpoint in ENDPOINTS}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def write_config(path: Path, variables: Mapping[str, Any]) -> None:
    lines = ["[variables]"] + [f'"{name}" = {_toml_value(value)}' for name, value in variables.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def gateway_command(data_dir: Path, config_path: Path, port: int, *, workers: int, host: str = "127.0.0.1") -> list[str]:
    return [
        sys.executable,
        "-m",
        "gateway.cli",
        "serve",
        "--data-dir",
        str(data_dir),
        "--config",
        str(config_path),
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--no-demo",  # the demo corpus build would compete for the CPU with the tests
    ]


@contextlib.contextmanager
def start_gateway(
    *,
    workers: int = 1,
    tokens: Mapping[str, str] | None = None,
    variables: Mapping[str, Any] | None = None,
    ca_path: Path | None = None,
    startup_timeout_s: float = 45.0,
    host: str = "127.0.0.1",
    command_prefix: Sequence[str] = (),
) -> Iterator[GatewayProcess]:
    """Run a gateway until the block ends. `tokens` values may be comma-separated lists (rotation).
    `host` is the bind address (--host); the test talks to it on 127.0.0.1 either way.
    `command_prefix` runs it under another command (e.g. `unshare --pid`: a host of its own, as
    far as process ids go)."""
    token_lists = dict(tokens) if tokens is not None else default_tokens()
    with tempfile.TemporaryDirectory(prefix="mcpgw-test-") as tmp:
        data_dir = Path(tmp) / "data"
        data_dir.mkdir()
        config_path = Path(tmp) / "gateway.toml"
        log_path = Path(tmp) / "gateway.log"
        port = free_port()
        config: dict[str, Any] = {f"mcp-{endpoint}_endpoint_auth": value for endpoint, value in token_lists.items()}
        config.update({"mcp-use_ssl": True, "mcp-port": port})
        config.update(variables or {})
        write_config(config_path, config)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
        with open(log_path, "wb") as log_file:
            process = subprocess.Popen(
                [*command_prefix, *gateway_command(data_dir, config_path, port, workers=workers, host=host)],
                cwd=tmp,
                env=env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # so stop() can signal uvicorn's worker processes too
            )
        gateway = GatewayProcess(
            base_url=f"https://127.0.0.1:{port}",
            tokens={endpoint: value.split(",")[0].strip() for endpoint, value in token_lists.items()},
            ca_path=ca_path or data_dir / "tls" / "cert.pem",  # a configured certificate's own file
            data_dir=data_dir,
            config_path=config_path,
            log_path=log_path,
            process=process,
        )
        try:
            _wait_healthy(gateway, startup_timeout_s, workers=workers)
            yield gateway
        finally:
            stop_gateway(gateway)


def _wait_healthy(gateway: GatewayProcess, timeout_s: float, *, workers: int = 1) -> None:
    """Until /healthz answers and, with several workers, every one of them reports serving
    (each adds 1 to mcp_gateway_workers when its startup completes)."""
    deadline = time.monotonic() + timeout_s
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        if gateway.process.poll() is not None:
            raise RuntimeError(
                f"gateway exited with code {gateway.process.returncode} before it was healthy:\n{gateway.log_tail()}"
            )
        if gateway.ca_path.exists():
            try:
                answer = httpx.get(f"{gateway.base_url}/healthz", verify=gateway.ssl_context(), timeout=2.0)
                if answer.status_code == 200 and (workers == 1 or _serving_workers(gateway) >= workers):
                    return
                last_error = f"/healthz answered {answer.status_code}"
            except (httpx.HTTPError, OSError) as exc:  # not listening yet, or cert still being written
                last_error = repr(exc)
        time.sleep(0.1)
    raise RuntimeError(f"gateway not healthy within {timeout_s} s ({last_error}):\n{gateway.log_tail()}")


def _serving_workers(gateway: GatewayProcess) -> int:
    answer = httpx.get(f"{gateway.base_url}/metrics", verify=gateway.ssl_context(), timeout=2.0)
    for line in answer.text.splitlines():
        if line.startswith("mcp_gateway_workers "):
            return int(float(line.split()[1]))
    return 0


def stop_gateway(gateway: GatewayProcess, *, grace_s: float = 10.0) -> None:
    process = gateway.process
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)


# -- JSON-RPC over the real HTTP path -------------------------------------------------------------

META_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
MODERN_VERSION = "2026-07-28"


def rpc_body(
    method: str, params: dict[str, Any] | None = None, *, msg_id: int | str | None = 1, modern: bool = False
) -> dict[str, Any]:
    """A JSON-RPC message; `msg_id=None` makes it a notification; `modern` adds the 2026 _meta envelope."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if msg_id is not None:
        message["id"] = msg_id
    if params is not None or modern:
        message["params"] = dict(params or {})
    if modern:
        message["params"]["_meta"] = {**message["params"].get("_meta", {}), META_VERSION_KEY: MODERN_VERSION}
    return message


def post_rpc(
    client: httpx.Client,
    gateway: GatewayProcess,
    endpoint: str,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    msg_id: int | str | None = 1,
    version: str | None = "2025-06-18",
    modern: bool = False,
    token: str | None = "",
    headers: Mapping[str, str] | None = None,
) -> httpx.Response:
    """POST one message. token "" means the endpoint's own token, None no Authorization header."""
    sent: dict[str, str] = {"Accept": "application/json, text/event-stream"}
    if token is not None:
        sent["Authorization"] = f"Bearer {token or gateway.tokens[endpoint]}"
    if modern:
        sent.update({"MCP-Protocol-Version": MODERN_VERSION, "Mcp-Method": method})
    elif version is not None:
        sent["MCP-Protocol-Version"] = version
    sent.update(headers or {})
    return client.post(f"/mcp/{endpoint}", json=rpc_body(method, params, msg_id=msg_id, modern=modern), headers=sent)


def call_tool(
    client: httpx.Client, gateway: GatewayProcess, endpoint: str, name: str, arguments: dict[str, Any], **kwargs: Any
) -> dict[str, Any]:
    """tools/call that must succeed at the protocol level; returns the MCP result."""
    response = post_rpc(client, gateway, endpoint, "tools/call", {"name": name, "arguments": arguments}, **kwargs)
    assert response.status_code == 200, (response.status_code, response.text)
    answer = response.json()
    assert "result" in answer, answer
    return answer["result"]


def registered_endpoints() -> tuple[str, ...]:
    """The endpoints this build serves: those with a handler in handlers.HANDLER_CLASSES."""
    from handlers import HANDLER_CLASSES

    registered = {cls.endpoint for cls in HANDLER_CLASSES}
    return tuple(endpoint for endpoint in ENDPOINTS if endpoint in registered)
