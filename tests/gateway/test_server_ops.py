"""Operating a real gateway: runtime changes across workers, metrics, TLS rotation."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time

import httpx
import pytest
from server_process import REPO_ROOT, call_tool, start_gateway

from gateway import tls


def _fresh_get(gw, endpoint: str, name: str, arguments: dict) -> dict:
    """A new connection per call so uvicorn's workers each get a share of them."""
    with gw.client() as client:
        return call_tool(client, gw, endpoint, name, arguments)["structuredContent"]


def test_runtime_change_reaches_every_worker_within_a_second_and_metrics_add_up():
    with start_gateway(workers=2) as gw:
        with gw.client() as client:
            out = call_tool(client, gw, "config", "set_config", {"variable_name": "mcp-timeout_ms", "value": "4321"})[
                "structuredContent"
            ]
        assert out["applied"] is True and out["saved"] is False
        time.sleep(1.0)
        seen = {_fresh_get(gw, "config", "get_config", {"variable_name": "mcp-timeout_ms"})["value"] for _ in range(12)}
        assert seen == {"4321"}
        with gw.client() as client:
            metrics = client.get("/metrics").text
        versions = {line.rsplit(" ", 1)[1] for line in metrics.splitlines() if line.startswith("mcp_gateway_runtime_version{")}
        pids = [line for line in metrics.splitlines() if line.startswith("mcp_gateway_runtime_version{")]
        assert len(pids) == 2 and len(versions) == 1, pids
        assert "mcp_gateway_workers 2.0" in metrics
        time.sleep(1.2)  # each worker writes its aggregated counters once a second
        status = _fresh_get(gw, "config", "get_status", {})
        assert status["workers"] == 2 and status["requests_total"] >= 13  # 1 set + 12 gets; this call is counted after it answers
        usage = _fresh_get(gw, "stats", "show_tool_usage", {"endpoint": "config", "reset": True})
        counts = {row["tool"]: row["count"] for row in usage["tools"]}
        assert counts["get_config"] == 12 and counts["set_config"] == 1
        after = _fresh_get(gw, "stats", "show_tool_usage", {"endpoint": "config"})
        assert {row["tool"] for row in after["tools"]} <= {"get_status"}


def test_metrics_pass_promtool_and_can_require_a_token():
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool (Debian package prometheus) is missing under CI")
        pytest.skip("promtool not installed")
    metrics_token = "metrics-token-0123456789abcdef"
    with start_gateway(variables={"mcp-metrics_auth": metrics_token}) as gw, gw.client() as client:
        call_tool(client, gw, "config", "get_config", {"variable_name": "mcp-port"})
        client.post("/mcp/config", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})  # a 401
        refused = client.get("/metrics")
        assert refused.status_code == 401 and "WWW-Authenticate" in refused.headers
        answer = client.get("/metrics", headers={"Authorization": f"Bearer {metrics_token}"})
        assert answer.status_code == 200
        text = answer.text
        for token in gw.tokens.values():
            assert token not in text
        assert 'mcp_server_operation_duration_seconds_count{endpoint="config",method="tools/call"' in text
        assert 'mcp_gateway_auth_failures_total{endpoint="config",reason="missing"} 1.0' in text
        check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
        # promtool exits 0 when the exposition is valid; lint hints would be printed, not failures
        assert check.returncode == 0, check.stdout + check.stderr


def test_metrics_also_served_on_a_plain_port():
    from server_process import free_port

    port = free_port()
    with start_gateway(workers=2, variables={"mcp-metrics_port": port}) as gw, gw.client() as client:
        call_tool(client, gw, "config", "get_config", {"variable_name": "mcp-port"})
        time.sleep(1.5)  # workers write their aggregated updates once a second
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert "mcp_gateway_workers 2.0" in text  # the supervisor itself is not counted
        assert 'tool="get_config"' in text
        # The handlers' scrape-time collectors (the RAG index) and the supervisor's restart count are there too.
        assert "# TYPE mcp_rag_documents gauge" in text and "mcp_rag_index_bytes " in text
        assert "mcp_gateway_worker_restarts_total 0.0" in text


def _peer_fingerprint(port: int, ca: str) -> str:
    context = ssl.create_default_context(cafile=ca)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port)) as raw, context.wrap_socket(raw, server_hostname="localhost") as conn:
        return hashlib.sha256(conn.getpeercert(binary_form=True)).hexdigest()


def test_certificate_files_are_reread_on_reload_without_restart(tmp_path):
    cert_a, key_a = tls.ensure_self_signed(tmp_path / "a")
    cert_b, key_b = tls.ensure_self_signed(tmp_path / "b")
    live_cert, live_key = tmp_path / "live-cert.pem", tmp_path / "live-key.pem"
    shutil.copy(cert_a, live_cert)
    shutil.copy(key_a, live_key)
    with start_gateway(workers=2, variables={"mcp-ssl_cert": str(live_cert), "mcp-ssl_key": str(live_key)}, ca_path=cert_a) as gw:
        port = int(gw.base_url.rsplit(":", 1)[1])
        fp_a = hashlib.sha256(ssl.PEM_cert_to_DER_cert(cert_a.read_text())).hexdigest()
        fp_b = hashlib.sha256(ssl.PEM_cert_to_DER_cert(cert_b.read_text())).hexdigest()
        assert _peer_fingerprint(port, str(cert_a)) == fp_a
        shutil.copy(cert_b, live_cert)
        shutil.copy(key_b, live_key)
        with httpx.Client(verify=ssl.create_default_context(cafile=str(cert_a)), timeout=10) as client:
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "reload_config", "arguments": {"scope": "runtime"}},
            }
            answer = client.post(
                f"{gw.base_url.replace('127.0.0.1', 'localhost')}/mcp/config", json=body, headers=gw.auth("config")
            )
            assert answer.json()["result"]["isError"] is False
        time.sleep(1.0)
        assert {_peer_fingerprint(port, str(cert_b)) for _ in range(6)} == {fp_b}


def test_a_handler_that_fails_to_start_answers_unavailable_while_the_rest_serve():
    # openai without an API base cannot be constructed: the rag handler's init fails.
    with start_gateway(variables={"rag-embedding_provider": "openai"}) as gw, gw.client() as client:
        listed = client.post("/mcp/rag", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=gw.auth("rag")).json()
        assert any(t["name"] == "rag.search_hybrid" for t in listed["result"]["tools"])  # still discoverable
        down = call_tool(client, gw, "rag", "rag.search_hybrid", {"query": "anything"})
        assert down["isError"] and down["structuredContent"]["error"]["code"] == "UNAVAILABLE"
        assert "/mcp/rag is unavailable" in down["structuredContent"]["error"]["message"]
        assert call_tool(client, gw, "config", "get_config", {"variable_name": "mcp-port"})["isError"] is False
        health = call_tool(client, gw, "stats", "get_health", {})["structuredContent"]
        rag = next(h for h in health["handlers"] if h["endpoint"] == "rag")
        assert health["status"] == "degraded" and rag["status"] == "down" and rag["reason"]
        assert client.get("/healthz").json()["status"] == "degraded"
        assert 'mcp_gateway_handler_up{endpoint="rag"} 0.0' in client.get("/metrics").text
        ready = client.get("/readyz")  # a load balancer or Kubernetes takes it out of rotation
        assert ready.status_code == 503 and "rag" in ready.json()["down"]
        # The container HEALTHCHECK: alive (exit 0), not ready (exit 1).
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        probe = [sys.executable, "-m", "gateway.cli", "healthcheck", "--data-dir", str(gw.data_dir)]
        assert subprocess.run(probe, env=env, capture_output=True, timeout=60).returncode == 0
        not_ready = subprocess.run([*probe, "--ready"], env=env, capture_output=True, text=True, timeout=60)
        assert not_ready.returncode == 1 and "503" in not_ready.stderr
