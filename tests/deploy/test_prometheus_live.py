"""The shipped Prometheus configuration against a real Prometheus (Debian package) and a real
gateway with two workers.

Prometheus runs on loopback with deploy/prometheus/prometheus.yml, rewritten only where a test
must: the target's port, the CA file, a 1 s scrape and evaluation interval, and the shipped rule
file with every `for:` set to 0s (the expressions are the shipped ones). Traffic includes auth
failures, server-side tool errors (a target whose port is closed), a RAG sync that fails, a
certificate that expires in five days and a worker killed with SIGKILL. Through Prometheus's
HTTP API the test sees the series with their labels, every rule evaluating without error, and
the alerts those conditions force firing. Every metric name the alert rules and the Grafana
dashboard reference is exported by the live gateway.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cert_factory import make_certificate
from server_process import GatewayProcess, call_tool, free_port, post_rpc, start_gateway

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = REPO / "deploy" / "prometheus"
DASHBOARD = REPO / "deploy" / "grafana" / "mcp-gateway.json"

FORCED_ALERTS = {
    "McpAuthFailureBurst",
    "McpEndpointErrorRatio",
    "McpCertificateExpiresSoon",
    "McpWorkerRestarts",
    "McpRagSyncFailing",
}
DOC_MAP = {"doc_id": {"format": "notes:{id}"}, "body": {"concat": [{"col": "body"}]}}


def _require_prometheus() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus (Debian package prometheus) is missing under CI")
        pytest.skip("prometheus not installed")
    return binary


def write_prometheus_config(directory: Path, *, target: str, ca_file: Path) -> Path:
    """The shipped scrape config and rules, with ports, the CA file, intervals and `for:` rewritten."""
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    (job,) = [job for job in config["scrape_configs"] if job["job_name"] == "mcp-gateway"]
    job["static_configs"][0]["targets"] = [target]
    job["tls_config"]["ca_file"] = str(ca_file)
    rules = yaml.safe_load((PROMETHEUS_DIR / "mcp-gateway-alerts.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = "0s"
    (rule_file,) = config["rule_files"]
    (directory / rule_file).write_text(yaml.safe_dump(rules))
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@contextlib.contextmanager
def run_prometheus(config: Path) -> Iterator[str]:
    port = free_port()
    log = open(config.parent / "prometheus.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [
            _require_prometheus(),
            f"--config.file={config}",
            f"--storage.tsdb.path={config.parent / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=1h",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            if process.poll() is not None:
                raise RuntimeError((config.parent / "prometheus.log").read_text()[-3000:])
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/-/ready", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("prometheus did not become ready")
            time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def query(base: str, expr: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{base}/api/v1/query", params={"query": expr}, timeout=5).json()
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def wait_for(what: str, check, timeout_s: float = 15.0, why=None):  # noqa: ANN001 - callables returning values
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {why() if why else value!r}")
        time.sleep(0.25)


def admin(client: httpx.Client, gw: GatewayProcess, statement: str) -> None:
    result = call_tool(client, gw, "admin", "admin.sql", {"statement": statement})
    assert not result.get("isError"), (statement, result)


def configure_backends(client: httpx.Client, gw: GatewayProcess, tmp: Path) -> None:
    """A MySQL target on a closed port (its calls fail UNAVAILABLE) and a RAG source whose table
    does not exist (its sync fails)."""
    corpus = tmp / "corpus.db"
    import sqlite3

    with sqlite3.connect(corpus) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    admin(client, gw, "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username) VALUES ('nobody', 'nobody')")
    admin(
        client,
        gw,
        "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id) "
        f"VALUES ('closed', 'mysql', '127.0.0.1', {free_port()}, 'nothing', 'nobody')",
    )
    admin(
        client,
        gw,
        "INSERT INTO mcp_target_profiles (target_id, protocol, database, cache_ttl_ms) "
        f"VALUES ('files', 'sqlite', '{corpus}', 60000)",
    )
    admin(client, gw, "LOAD MCP PROFILES TO RUNTIME")
    admin(
        client,
        gw,
        "INSERT INTO rag_sources (source_id, name, target_id, table_name, pk_column, doc_map_json) "
        f"VALUES (1, 'broken', 'files', 'missing_table', 'id', '{json.dumps(DOC_MAP)}')",
    )
    admin(client, gw, "LOAD RAG SOURCES TO RUNTIME")


def bad_token_calls(gw: GatewayProcess, n: int) -> None:
    with gw.client() as client:
        for _ in range(n):
            answer = post_rpc(client, gw, "query", "tools/list", token="not-the-token-0123456789")
            assert answer.status_code == 401


def unavailable_calls(gw: GatewayProcess, n: int) -> None:
    with gw.client() as client:
        for _ in range(n):
            result = call_tool(client, gw, "query", "run_sql_readonly", {"sql": "SELECT 1", "target_id": "closed"})
            assert result["isError"] and result["structuredContent"]["error"]["code"] == "UNAVAILABLE", result


def firing_alerts(base: str) -> set[str]:
    alerts = httpx.get(f"{base}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    return {alert["labels"]["alertname"] for alert in alerts if alert["state"] == "firing"}


def worker_pids(gw: GatewayProcess) -> set[int]:
    with gw.client() as client:
        text = client.get("/metrics").text
    return {int(pid) for pid in re.findall(r'^mcp_gateway_process_start_time_seconds\{pid="(\d+)"\}', text, re.M)}


def exported_names(metrics_text: str) -> set[str]:
    """Every sample name and every declared family (HELP/TYPE, also those with no sample yet)."""
    names = set()
    for line in metrics_text.splitlines():
        if line.startswith("# TYPE ") or line.startswith("# HELP "):
            family = line.split()[2]
            names |= {family, *(family + suffix for suffix in ("_total", "_bucket", "_sum", "_count", "_created"))}
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def referenced_names() -> dict[str, set[str]]:
    """Metric names in the alert expressions and the dashboard's queries, by where they appear."""
    pattern = re.compile(r"\b(mcp_[a-z0-9_]+)")
    rules = yaml.safe_load((PROMETHEUS_DIR / "mcp-gateway-alerts.yml").read_text())
    exprs = {f"alert {rule['alert']}": rule["expr"] for group in rules["groups"] for rule in group["rules"]}
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            exprs[f"panel {panel['title']!r}"] = exprs.get(f"panel {panel['title']!r}", "") + " " + target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            exprs[f"variable {variable['name']}"] = variable["query"]
    return {where: set(pattern.findall(expr)) for where, expr in exprs.items()}


def test_shipped_prometheus_config_scrapes_two_workers_and_fires_the_shipped_alerts():
    _require_prometheus()
    with tempfile.TemporaryDirectory(prefix="mcpgw-prom-") as tmp_name:
        tmp = Path(tmp_name)
        cert, key, not_after = make_certificate(tmp, days=5)
        variables = {"mcp-ssl_cert": str(cert), "mcp-ssl_key": str(key), "rag-embedding_provider": "hash"}
        with start_gateway(workers=2, variables=variables, ca_path=cert) as gw:
            with gw.client() as client:
                configure_backends(client, gw, tmp)
                time.sleep(1.0)  # every worker serves a LOAD within a second
                call_tool(client, gw, "config", "get_config", {"variable_name": "mcp-port"})
                missing = call_tool(client, gw, "config", "get_config", {"variable_name": "no-such-variable"})
                assert missing["isError"]  # a client error: counted, but not a server-side failure
                for _ in range(2):  # a miss, then a hit of the result cache; clearing it evicts the entry
                    call_tool(
                        client, gw, "query", "run_sql_readonly", {"target_id": "files", "sql": "SELECT count(*) FROM notes"}
                    )
                assert call_tool(client, gw, "cache", "clear_cache", {})["structuredContent"]["dropped"] == 1
                sync = call_tool(client, gw, "rag", "rag.admin.sync", {"source_names": ["broken"]})
                assert sync["structuredContent"].get("accepted"), sync
                assert client.get("/readyz").status_code == 200
            bad_token_calls(gw, 3)  # the failure series exist before the burst, so increase() sees it
            unavailable_calls(gw, 2)
            config = write_prometheus_config(tmp, target=gw.base_url.removeprefix("https://"), ca_file=cert)
            with run_prometheus(config) as prom:
                wait_for("a scrape with the first auth failures", lambda: query(prom, "mcp_gateway_auth_failures_total"))
                bad_token_calls(gw, 150)
                unavailable_calls(gw, 40)  # rate over the 5m window: 40/300 s clears the 0.05/s traffic floor
                os.kill(max(worker_pids(gw)), signal.SIGKILL)  # uvicorn's supervisor replaces it

                seen: dict[str, set[str]] = {"firing": set()}

                def all_forced_fire() -> set[str] | None:
                    seen["firing"] = firing_alerts(prom)
                    return seen["firing"] if seen["firing"] >= FORCED_ALERTS else None

                firing = wait_for("the forced alerts", all_forced_fire, 30, why=lambda: seen["firing"])
                assert "McpHandlerDown" not in firing and "McpGatewayDown" not in firing, firing

                targets = httpx.get(f"{prom}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
                assert [t["health"] for t in targets] == ["up"], targets
                groups = httpx.get(f"{prom}/api/v1/rules", timeout=5).json()["data"]["groups"]
                rules = [rule for group in groups for rule in group["rules"]]
                assert len(rules) == 13 and all(rule["health"] == "ok" for rule in rules), [
                    (r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"
                ]

                auth = query(prom, 'mcp_gateway_auth_failures_total{job="mcp-gateway", endpoint="query"}')
                assert {s["metric"]["reason"] for s in auth} and auth[0]["metric"]["service"] == "mcp-gateway", auth
                errors = query(prom, 'mcp_gateway_errors_total{endpoint="query", error_code="UNAVAILABLE"}')
                assert errors and errors[0]["metric"]["jsonrpc_code"] == "0", errors
                durations = query(
                    prom, 'mcp_server_operation_duration_seconds_count{tool="run_sql_readonly", outcome="UNAVAILABLE"}'
                )
                assert durations and durations[0]["metric"]["method"] == "tools/call", durations
                assert query(prom, 'mcp_server_operation_duration_seconds_count{tool="get_config", outcome="NOT_FOUND"}')
                handlers_up = {s["metric"]["endpoint"]: s["value"][1] for s in query(prom, "mcp_gateway_handler_up")}
                assert handlers_up and set(handlers_up.values()) == {"1"}, handlers_up
                (expiry,) = query(prom, "mcp_gateway_tls_certificate_not_after_seconds")
                assert float(expiry["value"][1]) == not_after.timestamp()
                (restarts,) = query(prom, "mcp_gateway_worker_restarts_total")
                assert float(restarts["value"][1]) == 1.0
                pools = query(prom, 'mcp_gateway_pool_max_connections{target_id="closed"}')
                assert pools and float(pools[0]["value"][1]) >= 1, pools
                (hits,) = query(prom, 'mcp_cache_hits_total{target_id="files"}')
                assert float(hits["value"][1]) == 1.0
                (cleared,) = query(prom, 'mcp_cache_evictions_total{target_id="files",reason="cleared"}')
                assert float(cleared["value"][1]) == 1.0
                (failing,) = query(prom, 'mcp_rag_sync_failing{source="broken"}')
                assert failing["value"][1] == "1"
                memory = query(prom, "max by (pid) (max_over_time(mcp_gateway_process_resident_memory_bytes[1m]))")
                assert len(memory) >= 2, memory  # one series per worker process

            for _ in range(6):  # new connections: both workers (one of them new) serve calls again
                with gw.client() as client:
                    call_tool(client, gw, "config", "get_config", {"variable_name": "mcp-port"})
            time.sleep(1.2)  # and fold them into the shared metric files
            with gw.client() as client:
                live = exported_names(client.get("/metrics").text)
        unknown = {where: names - live for where, names in referenced_names().items()}
        assert not {where: names for where, names in unknown.items() if names}, unknown


def test_a_fresh_gateway_exports_every_name_the_dashboard_and_alerts_use():
    """Before any call, every family exists (zero-valued where it has no labels yet), on /metrics
    and on the plain metrics port the shipped deployments scrape: a fresh deployment's panels show
    0, not "No data", and absence-sensitive alerts do not misfire."""
    plain = free_port()
    with start_gateway(workers=2, variables={"mcp-metrics_port": plain}) as gw, gw.client() as client:
        texts = {
            "/metrics": client.get("/metrics").text,
            "plain port": httpx.get(f"http://127.0.0.1:{plain}/metrics", timeout=5).text,
        }
    for where, text in texts.items():
        live = {line.split()[0].split("{")[0] for line in text.splitlines() if line and not line.startswith("#")}
        unknown = {place: names - live for place, names in referenced_names().items()}
        assert not {place: names for place, names in unknown.items() if names}, (where, unknown)
        # no zero where zero would be a false alarm: a certificate expiring at 1970, a handler down
        assert "mcp_gateway_tls_certificate_not_after_seconds 0.0" not in text and "mcp_gateway_handler_up 0.0" not in text
