"""What the tests of several gateways on one PostgreSQL share: admin statements, waiting for a
change to be served, a MariaDB table as a RAG source, sync jobs started and awaited over MCP."""

from __future__ import annotations

import json
import time

import httpx
import psycopg
from server_process import GatewayProcess, call_tool, post_rpc


def member_variables(name: str, *, config_dsn: str, rag_dsn: str) -> dict[str, object]:
    """A cluster member's variables: the shared configuration and RAG index, the hash embedder."""
    return {
        "mcp-cluster_dsn": config_dsn,
        "mcp-cluster_member_name": name,
        "rag-backend": "postgresql",
        "rag-postgres_dsn": rag_dsn,
        "rag-embedding_provider": "hash",
        "rag-embedding_dim": 64,
    }


def admin(gateway: GatewayProcess, client: httpx.Client, statement: str) -> dict:
    result = call_tool(client, gateway, "admin", "admin.sql", {"statement": statement})
    assert not result.get("isError"), result
    return result["structuredContent"]


def status_code(gateway: GatewayProcess, client: httpx.Client, endpoint: str, token: str) -> int:
    return post_rpc(client, gateway, endpoint, "tools/list", token=token).status_code


def wait_until(check, timeout_s: float) -> float:
    """Seconds until `check()` held (for several calls in a row, so each worker answered), or fail."""
    started = time.monotonic()
    streak = 0
    while time.monotonic() - started < timeout_s:
        streak = streak + 1 if check() else 0
        if streak >= 4:
            return time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError(f"not served within {timeout_s} s")


DOC_MAP = {
    "doc_id": {"format": "posts:{id}"},
    "title": {"concat": [{"col": "title"}]},
    "body": {"concat": [{"col": "body"}]},
    "metadata": {"pick": ["score"], "rename": {"score": "Score"}},
}
TOPICS = ("replication lag", "index tuning", "json parsing", "deadlock detection", "backup recovery")
KILL_ROWS = 1000


def maria(db: dict, *statements: str, rows: list[tuple] | None = None) -> None:
    import pymysql

    with pymysql.connect(**db, autocommit=True) as conn, conn.cursor() as cur:
        for sql in statements:
            cur.executemany(sql, rows) if rows is not None else cur.execute(sql)


def posts_rows(first: int, last: int) -> list[tuple]:
    """Rows id first..last of a posts-shaped table (id, title, body, score), the topics cycling."""
    return [
        (i, f"{TOPICS[i % 5]} question {i}", f"how to handle {TOPICS[i % 5]} in mysql, case {i}", i)
        for i in range(first, last + 1)
    ]


def insert_posts(db: dict, table: str, rows: list[tuple]) -> None:
    maria(db, f"INSERT INTO {table} (id, title, body, score) VALUES (%s, %s, %s, %s)", rows=rows)


def posts_table(db: dict, table: str, rows: list[tuple]) -> None:
    """A MariaDB table shaped as a RAG source (a watermark on updated_at), holding `rows`."""
    maria(
        db,
        f"CREATE TABLE {table} (id INT PRIMARY KEY, title VARCHAR(200), body TEXT, score INT,"
        " updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), KEY (updated_at, id))",
    )
    insert_posts(db, table, rows)


def define_source(gateway: GatewayProcess, client: httpx.Client, db: dict, *, source_id: int, table: str) -> None:
    """A MariaDB table as a RAG source, defined through one instance: cluster-wide configuration."""
    doc_map = json.dumps({**DOC_MAP, "doc_id": {"format": f"{table}:{{id}}"}})
    admin(gateway, client, "REPLACE INTO mcp_auth_profiles (auth_profile_id, db_username) VALUES ('maria_root', 'root')")
    admin(
        gateway,
        client,
        "REPLACE INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id) "
        f"VALUES ('maria', 'mysql', '{db['host']}', {db['port']}, '{db['database']}', 'maria_root')",
    )
    admin(
        gateway,
        client,
        "INSERT INTO rag_sources (source_id, name, target_id, table_name, pk_column, watermark_column, doc_map_json, chunking_json) "
        f"VALUES ({source_id}, '{table}', 'maria', '{table}', 'id', 'updated_at', '{doc_map}', "
        '\'{"chunk_size": 200, "overlap": 20, "min_chunk_size": 50}\')',
    )
    admin(gateway, client, "LOAD MCP PROFILES TO RUNTIME")
    admin(gateway, client, "LOAD RAG SOURCES TO RUNTIME")


def start_sync(gateway: GatewayProcess, client: httpx.Client, source: str) -> str:
    def accepted() -> dict:
        return call_tool(client, gateway, "rag", "rag.admin.sync", {"source_names": [source]})

    # The source reaches this instance's runtime within a second of the LOAD elsewhere.
    deadline = time.monotonic() + 5
    while (answer := accepted()).get("isError") and time.monotonic() < deadline:
        time.sleep(0.05)
    started = answer["structuredContent"]
    assert started["accepted"], started
    return started["job_id"]


def finished_job(gateway: GatewayProcess, client: httpx.Client, job_id: str, timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        (job,) = call_tool(client, gateway, "rag", "rag.admin.jobs", {"job_id": job_id})["structuredContent"]["jobs"]
        if job["state"] not in ("queued", "running"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish within {timeout_s} s")


def index_counts(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
        return {
            "docs": one("SELECT count(*) FROM rag_documents"),
            "chunks": one("SELECT count(*) FROM rag_chunks"),
            "distinct_chunks": one("SELECT count(DISTINCT (doc_id, chunk_index)) FROM rag_chunks"),
            "chunks_without_vector": one("SELECT count(*) FROM rag_chunks WHERE embedding IS NULL"),
        }


def search(gateway: GatewayProcess, client: httpx.Client, query: str) -> dict:
    return call_tool(client, gateway, "rag", "rag.search_hybrid", {"query": query, "k": 8})
