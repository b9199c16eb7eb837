"""Two real gateways on one PostgreSQL RAG index (rag-backend = postgresql), as a cluster runs it:
what an operator reads about the index is the same through either, and right.

- /metrics on either instance shows the index's documents, chunks, size and sync state read
  from PostgreSQL (not from a rag.db the instance does not have), exactly after a sync.
- `mcp-gateway rag sync` run against an instance's data directory syncs into PostgreSQL, draws
  its progress on the terminal and prints the job's status; either instance reports that job.
- A job running on instance A is reported running by instance B, although A's pid means nothing
  on B (B runs in a PID namespace of its own: another host, as far as process ids go); once A is
  killed, B reports it interrupted (its sync lock went with its PostgreSQL session).

The tests run in order on one pair of gateways (module-scoped).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import psycopg
import pymysql
import pytest
from pgvector_server import PgvectorServer
from prometheus_client.parser import text_string_to_metric_families
from server_process import REPO_ROOT, GatewayProcess, call_tool, default_tokens, start_gateway

from tests.cluster.support import (
    TOPICS,
    define_source,
    finished_job,
    insert_posts,
    member_variables,
    posts_rows,
    posts_table,
    start_sync,
    wait_until,
)

# Instance B's own PID namespace: A's pids do not exist there, as on another host.
OTHER_HOST = ("unshare", "--pid", "--fork", "--mount-proc")


@dataclass
class Pair:
    a: GatewayProcess
    b: GatewayProcess
    clients: dict[str, httpx.Client]
    rag_dsn: str


def _namespaces_available() -> bool:
    try:
        return subprocess.run([*OTHER_HOST, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="module")
def pair(pgvector_server: PgvectorServer) -> Iterator[Pair]:
    if not _namespaces_available():
        if os.environ.get("CI"):
            pytest.fail("unshare --pid (a PID namespace) is not available under CI")
        pytest.skip("unshare --pid is not available (needs root or user namespaces)")
    config_dsn = pgvector_server.create_database("mcpgw_pair_config")
    rag_dsn = pgvector_server.create_database("mcpgw_pair_rag")
    tokens = default_tokens()

    def variables(name: str) -> dict[str, object]:
        return member_variables(name, config_dsn=config_dsn, rag_dsn=rag_dsn)

    with contextlib.ExitStack() as stack:
        a = stack.enter_context(start_gateway(tokens=tokens, variables=variables("gw_a")))
        b = stack.enter_context(start_gateway(tokens=tokens, variables=variables("gw_b"), command_prefix=OTHER_HOST))
        clients = {"a": stack.enter_context(a.client()), "b": stack.enter_context(b.client())}
        yield Pair(a, b, clients, rag_dsn)
    for database in ("mcpgw_pair_config", "mcpgw_pair_rag"):
        pgvector_server.drop_database(database)


def rag_gauges(gateway: GatewayProcess, client: httpx.Client) -> dict[tuple[str, str], float]:
    """{(metric, source label): value} of the mcp_rag_* samples in the instance's /metrics."""
    answer = client.get("/metrics")
    assert answer.status_code == 200, answer.text
    return {
        (sample.name, sample.labels.get("source", "")): sample.value
        for family in text_string_to_metric_families(answer.text)
        if family.name.startswith("mcp_rag_")
        for sample in family.samples
    }


def per_source(dsn: str, source_id: int) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        docs = conn.execute("SELECT count(*) FROM rag_documents WHERE source_id = %s", (source_id,)).fetchone()[0]
        chunks = conn.execute("SELECT count(*) FROM rag_chunks WHERE source_id = %s", (source_id,)).fetchone()[0]
    return {"docs": docs, "chunks": chunks}


def job_state(gateway: GatewayProcess, client: httpx.Client, job_id: str) -> dict:
    result = call_tool(client, gateway, "rag", "rag.admin.jobs", {"job_id": job_id})
    assert not result.get("isError"), result
    (job,) = result["structuredContent"]["jobs"]
    return job


def test_metrics_of_either_instance_show_the_postgresql_index_after_a_sync(pair: Pair, mariadb_db: dict) -> None:
    posts_table(mariadb_db, "posts", posts_rows(1, 60))
    define_source(pair.a, pair.clients["a"], mariadb_db, source_id=1, table="posts")
    job = finished_job(pair.b, pair.clients["b"], start_sync(pair.b, pair.clients["b"], "posts"))
    assert job["state"] == "ok", json.dumps(job)
    stored = per_source(pair.rag_dsn, 1)
    assert stored["docs"] == 60 and stored["chunks"] >= 60
    # The source rows behind indexed documents, through the instance that did not sync them.
    fetched = call_tool(
        pair.clients["a"], pair.a, "rag", "rag.fetch_from_source", {"doc_ids": ["posts:5", "posts:999"], "columns": ["title"]}
    )["structuredContent"]
    assert fetched["rows"] == [{"doc_id": "posts:5", "source_name": "posts", "row": {"title": f"{TOPICS[0]} question 5"}}]
    assert [(e["doc_id"], e["code"]) for e in fetched["errors"]] == [("posts:999", "NOT_FOUND")]

    for gateway, client in ((pair.a, pair.clients["a"]), (pair.b, pair.clients["b"])):

        def shown(g: GatewayProcess = gateway, c: httpx.Client = client) -> bool:
            gauges = rag_gauges(g, c)
            return (
                gauges.get(("mcp_rag_documents", "posts")) == stored["docs"]
                and gauges.get(("mcp_rag_chunks", "posts")) == stored["chunks"]
            )

        wait_until(shown, 15.0)  # each process reads PostgreSQL at most every few seconds
        gauges = rag_gauges(gateway, client)
        assert gauges[("mcp_rag_sync_last_success_timestamp_seconds", "posts")] > 0
        assert gauges[("mcp_rag_sync_last_run_timestamp_seconds", "posts")] > 0
        assert gauges[("mcp_rag_sync_failing", "posts")] == 0
        assert gauges[("mcp_rag_index_bytes", "")] > 0
        assert ("mcp_rag_sync_running", "posts") not in gauges
        assert pair.rag_dsn not in client.get("/metrics").text


def test_cli_sync_into_postgresql_shows_progress_and_exact_counts(pair: Pair, mariadb_db: dict) -> None:
    insert_posts(mariadb_db, "posts", posts_rows(61, 80))
    before = per_source(pair.rag_dsn, 1)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))}
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "rag", "sync", "--source", "posts", "--data-dir", str(pair.a.data_dir)],
        cwd=pair.a.data_dir.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    # The terminal: a progress bar for the source (tqdm, on stderr), then the job's status on stdout.
    status = json.loads(done.stdout)
    assert status["state"] == "ok", status
    (posts,) = status["sources"]
    # The watermark cursor is inclusive (>=): the first 60 rows share one timestamp and are read
    # again, but only the 20 new rows' chunks are embedded; the others keep their vectors.
    read = posts["rows_total"]
    assert posts["phase"] == "done" and posts["rows_read"] == read and 20 <= read <= 80, posts
    assert "posts: 100%" in done.stderr and f"{read}/{read}" in done.stderr, done.stderr
    stored = per_source(pair.rag_dsn, 1)
    assert stored["docs"] == 80
    assert posts["chunks_embedded"] == stored["chunks"] - before["chunks"] > 0, (posts, before, stored)

    # Either instance reports the CLI's job, and its figures are the index's.
    job = job_state(pair.b, pair.clients["b"], status["job_id"])
    assert job["state"] == "ok" and job["sources"][0] == posts, job
    stats = call_tool(pair.clients["a"], pair.a, "rag", "rag.admin.stats", {})["structuredContent"]
    (source,) = [s for s in stats["sources"] if s["source_name"] == "posts"]
    assert (source["docs"], source["chunks"]) == (80, stored["chunks"]), source
    wait_until(
        lambda: rag_gauges(pair.b, pair.clients["b"]).get(("mcp_rag_documents", "posts")) == 80,
        15.0,
    )


@pytest.mark.slow
def test_a_job_running_on_one_instance_is_not_interrupted_on_another(pair: Pair, mariadb_db: dict) -> None:
    posts_table(mariadb_db, "held", posts_rows(1, 40))
    define_source(pair.a, pair.clients["a"], mariadb_db, source_id=2, table="held")
    # The source table locked: A's sync waits on its first read, running (and holding its lock) until we let go.
    locker = pymysql.connect(**mariadb_db, autocommit=True)
    try:
        with locker.cursor() as cur:
            cur.execute("LOCK TABLES held WRITE")
        job_id = start_sync(pair.a, pair.clients["a"], "held")
        wait_until(lambda: job_state(pair.a, pair.clients["a"], job_id)["state"] == "running", 10.0)

        for _ in range(5):  # B does not know A's pid, and must not call the job dead for that
            assert job_state(pair.b, pair.clients["b"], job_id)["state"] == "running"
        recent = call_tool(pair.clients["b"], pair.b, "rag", "rag.admin.stats", {})["structuredContent"]["jobs"]
        assert {j["job_id"]: j["state"] for j in recent}[job_id] == "running"
        wait_until(lambda: rag_gauges(pair.b, pair.clients["b"]).get(("mcp_rag_sync_running", "held")) == 1, 15.0)
        # A second sync of the source is refused through B: the job holds the cluster-wide lock.
        refused = call_tool(pair.clients["b"], pair.b, "rag", "rag.admin.sync", {"source_names": ["held"]})
        assert refused["structuredContent"]["accepted"] is False and refused["structuredContent"]["job_id"] == job_id

        # A dies: its PostgreSQL sessions end, the lock with them, and B reports the job interrupted.
        os.killpg(pair.a.process.pid, signal.SIGKILL)
        pair.a.process.wait(timeout=10)
        wait_until(lambda: job_state(pair.b, pair.clients["b"], job_id)["state"] == "interrupted", 10.0)
        wait_until(lambda: ("mcp_rag_sync_running", "held") not in rag_gauges(pair.b, pair.clients["b"]), 15.0)
    finally:
        with contextlib.suppress(pymysql.MySQLError):
            locker.close()  # releases the table lock
    # B may sync the source now, and its own job reads as such on B.
    job = finished_job(pair.b, pair.clients["b"], start_sync(pair.b, pair.clients["b"], "held"))
    assert job["state"] == "ok" and job["sources"][0]["docs_written"] == 40, json.dumps(job)
    assert per_source(pair.rag_dsn, 2)["docs"] == 40
