"""RAG ingestion against real MariaDB and PostgreSQL: initial load, inserts/updates/deletes,
chunk-level re-embedding, bad rows, an unreachable source, and a kill -9 in mid-sync.

Every sync goes through the real path: rag_sources and target profiles in the config store,
LOAD ... TO RUNTIME, then `run_sync` (what `mcp-gateway rag sync` calls) or the JobManager
that rag.admin.sync uses. The index is checked directly: documents, chunks, the FTS index's
own integrity check, and vectors one-to-one with chunks.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from backends.retrieval.ingest.foreground import run_sync
from backends.retrieval.ingest.jobs import status_from_row
from gateway.assembly import open_config

ROOT = Path(__file__).resolve().parents[2]
DOC_MAP = {
    "doc_id": {"format": "posts:{id}"},
    "title": {"concat": [{"col": "title"}]},
    "body": {"concat": [{"col": "body"}]},
    "metadata": {"pick": ["tags", "score"], "rename": {"tags": "Tags", "score": "Score"}},
    "max_doc_chars": 20_000,
}
SMALL_CHUNKS = {"chunk_size": 200, "overlap": 20, "min_chunk_size": 50}


# -- helpers -------------------------------------------------------------------------------
def configure(data_dir: Path, *, targets: list[dict[str, Any]], sources: list[dict[str, Any]]) -> None:
    """Write profiles and sources into the memory layer and LOAD them, as an admin would."""
    store = open_config(data_dir)
    conn = store.conn()
    conn.execute("DELETE FROM main.rag_sources")
    conn.execute("DELETE FROM main.mcp_target_profiles")
    conn.execute("DELETE FROM main.mcp_auth_profiles")
    conn.execute("INSERT INTO main.mcp_auth_profiles (auth_profile_id, db_username) VALUES ('root', 'root'), ('pg', 'postgres')")
    for row in targets:
        cols = list(row)
        conn.execute(
            f"INSERT INTO main.mcp_target_profiles ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", list(row.values())
        )
    for row in sources:
        row = {
            "doc_map_json": json.dumps(DOC_MAP),
            "chunking_json": json.dumps(SMALL_CHUNKS),
            "embedding_json": json.dumps({"batch_size": 64}),
            **row,
        }
        cols = list(row)
        conn.execute(
            f"INSERT INTO main.rag_sources ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", list(row.values())
        )
    store.set_variable("rag-embedding_provider", "hash")
    for module in ("MCP VARIABLES", "MCP PROFILES", "RAG SOURCES"):
        store.load_to_runtime(module)
    store.close()


def sync(data_dir: Path, source: str, **kw: Any) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    code = run_sync(open_config(data_dir), source, progress=False, out=out, **kw)
    text = out.getvalue().strip()
    return code, (json.loads(text) if text else {})


def source_status(status: dict[str, Any]) -> dict[str, Any]:
    (only,) = status["sources"]
    return only


def index_state(data_dir: Path) -> dict[str, Any]:
    """What the index holds, and proof its three views of the chunks agree."""
    conn = apsw.Connection(str(data_dir / "rag.db"))
    try:
        one = lambda sql, *p: conn.execute(sql, p).fetchall()[0][0]  # noqa: E731
        conn.execute("INSERT INTO rag_fts_chunks (rag_fts_chunks) VALUES ('integrity-check')")  # raises if FTS drifted
        return {
            "docs": one("SELECT count(*) FROM rag_documents"),
            "chunks": one("SELECT count(*) FROM rag_chunks"),
            "vectors": one("SELECT count(*) FROM rag_vec_chunks"),
            "orphan_vectors": one(
                "SELECT count(*) FROM rag_vec_chunks v LEFT JOIN rag_chunks c ON c.chunk_rowid = v.chunk_rowid WHERE c.chunk_rowid IS NULL"
            ),
            "chunks_without_vector": one(
                "SELECT count(*) FROM rag_chunks c LEFT JOIN rag_vec_chunks v ON v.chunk_rowid = c.chunk_rowid WHERE v.chunk_rowid IS NULL"
            ),
            "doc_ids": {r[0] for r in conn.execute("SELECT doc_id FROM rag_documents")},
            "bodies": dict(conn.execute("SELECT doc_id, body FROM rag_documents").fetchall()),
            "fts": lambda term: {
                r[0]
                for r in conn.execute(
                    "SELECT c.doc_id FROM rag_fts_chunks f JOIN rag_chunks c ON c.chunk_rowid = f.rowid WHERE rag_fts_chunks MATCH ?",
                    (term,),
                )
            },
            "_conn": conn,
        }
    except Exception:
        conn.close()
        raise


def assert_consistent(state: dict[str, Any]) -> None:
    assert state["vectors"] == state["chunks"]
    assert state["orphan_vectors"] == 0 and state["chunks_without_vector"] == 0


def body_text(i: int, words: int = 100) -> str:
    return " ".join(f"w{i}x{j}" for j in range(words))


def maria_exec(db: dict[str, Any], *statements: str, args: list[Any] | None = None) -> None:
    import pymysql

    conn = pymysql.connect(**db, autocommit=True)
    try:
        with conn.cursor() as cur:
            for sql in statements:
                if args is not None:
                    cur.executemany(sql, args)
                else:
                    cur.execute(sql)
    finally:
        conn.close()


def maria_target(db: dict[str, Any], target_id: str = "maria", **over: Any) -> dict[str, Any]:
    return {
        "target_id": target_id,
        "protocol": "mysql",
        "host": db["host"],
        "port": db["port"],
        "database": db["database"],
        "auth_profile_id": "root",
        **over,
    }


# -- MariaDB: the incremental life of a source ---------------------------------------------
@pytest.fixture(scope="module")
def maria_posts(mariadb_db: dict[str, Any]) -> dict[str, Any]:
    maria_exec(
        mariadb_db,
        "CREATE TABLE posts (id INT PRIMARY KEY, title VARCHAR(200), body MEDIUMTEXT, raw_body VARBINARY(300) NULL,"
        " tags VARCHAR(100), score INT,"
        " updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6), KEY (updated_at, id))",
    )
    maria_exec(
        mariadb_db,
        "INSERT INTO posts (id, title, body, tags, score, updated_at) VALUES (%s, %s, %s, %s, %s, TIMESTAMPADD(MICROSECOND, %s, '2026-01-01'))",
        args=[(i, f"post {i}", body_text(i), "<sql><json>", i, i) for i in range(1, 121)],
    )
    return mariadb_db


def test_incremental_sync_follows_inserts_updates_and_deletes(tmp_path: Path, maria_posts: dict[str, Any]) -> None:
    configure(
        tmp_path,
        targets=[maria_target(maria_posts)],
        sources=[
            {
                "source_id": 1,
                "name": "posts",
                "target_id": "maria",
                "table_name": "posts",
                "pk_column": "id",
                "watermark_column": "updated_at",
            }
        ],
    )
    code, status = sync(tmp_path, "posts", batch_rows=25)
    assert code == 0, status
    first = source_status(status)
    state = index_state(tmp_path)
    assert state["docs"] == 120 and first["docs_written"] == 120 and first["rows_read"] == 120
    assert first["chunks_written"] == state["chunks"] == first["chunks_embedded"] > 120  # several chunks per post
    assert_consistent(state)
    chunks_of_7 = state["_conn"].execute("SELECT count(*) FROM rag_chunks WHERE doc_id = 'posts:7'").fetchall()[0][0]
    assert chunks_of_7 >= 3
    assert json.loads(
        state["_conn"].execute("SELECT metadata_json FROM rag_documents WHERE doc_id = 'posts:7'").fetchall()[0][0]
    ) == {"Tags": "<sql><json>", "Score": 7}

    # Nothing changed: only the row at the last watermark is re-read, nothing is re-embedded.
    code, status = sync(tmp_path, "posts")
    again = source_status(status)
    assert code == 0 and again["chunks_embedded"] == 0 and again["rows_read"] == 1

    # Insert two rows, change the tail of one body (same length, last word), retitle another, delete three.
    time.sleep(0.01)
    words = body_text(7).split()
    assert len(words[-1]) == 5
    words[-1] = "zebra"  # same length: chunk boundaries stay put, only the last chunk's text changes
    maria_exec(
        maria_posts,
        "INSERT INTO posts (id, title, body, tags, score) VALUES (500, 'fresh post', 'brand new marmalade text', '<new>', 1), (501, 'another', 'second new row', '', 2)",
        f"UPDATE posts SET body = '{' '.join(words)}' WHERE id = 7",
        "UPDATE posts SET title = 'renamed quokka' WHERE id = 8",
        "DELETE FROM posts WHERE id IN (3, 4, 5)",
    )
    code, status = sync(tmp_path, "posts")
    assert code == 0, status
    delta = source_status(status)
    state = index_state(tmp_path)
    assert state["docs"] == 120 + 2 - 3 and delta["docs_deleted"] == 3
    assert {"posts:3", "posts:4", "posts:5"}.isdisjoint(state["doc_ids"]) and {"posts:500", "posts:501"} <= state["doc_ids"]
    # Re-embedded: the one changed chunk of post 7, every chunk of post 8 (the title is in each
    # chunk's text), and the new rows' single chunks; every other chunk read kept its vector.
    chunks_of_8 = state["_conn"].execute("SELECT count(*) FROM rag_chunks WHERE doc_id = 'posts:8'").fetchall()[0][0]
    assert delta["chunks_embedded"] == 1 + chunks_of_8 + 2
    assert delta["chunks_reused"] == delta["chunks_written"] - delta["chunks_embedded"]
    assert state["fts"]("zebra") == {"posts:7"}
    assert state["fts"]("quokka") == {"posts:8"} and state["fts"]("marmalade") == {"posts:500"}
    assert_consistent(state)

    # A body that shrinks drops its surplus chunks (and their vectors and FTS rows).
    maria_exec(maria_posts, "UPDATE posts SET body = 'now short' WHERE id = 9")
    code, status = sync(tmp_path, "posts")
    state = index_state(tmp_path)
    assert state["_conn"].execute("SELECT count(*) FROM rag_chunks WHERE doc_id = 'posts:9'").fetchall()[0][0] == 1
    assert state["bodies"]["posts:9"] == "now short"
    assert_consistent(state)
    sync_state = (
        state["_conn"]
        .execute("SELECT mode, last_ok_at, last_error, last_key_scan_at FROM rag_sync_state WHERE source_id = 1")
        .fetchall()[0]
    )
    assert sync_state[0] == "watermark" and sync_state[1] and sync_state[2] is None and sync_state[3]


def test_bad_rows_are_skipped_with_their_keys(tmp_path: Path, mariadb_db: dict[str, Any]) -> None:
    maria_exec(
        mariadb_db,
        "CREATE TABLE messy (id INT PRIMARY KEY, title VARCHAR(50), body MEDIUMBLOB NULL, tags VARCHAR(10), score INT)",
    )
    rows = [(i, f"ok {i}", f"good text {i}".encode(), "", i) for i in range(1, 11)]
    rows += [
        (11, "null body", None, "", 0),
        (12, "latin1 bytes", b"caf\xe9 \xff\xfe", "", 0),
        (13, "too big", b"x" * 25_000, "", 0),
    ]
    maria_exec(mariadb_db, "INSERT INTO messy VALUES (%s, %s, %s, %s, %s)", args=rows)
    configure(
        tmp_path,
        targets=[maria_target(mariadb_db)],
        sources=[
            {
                "source_id": 2,
                "name": "messy",
                "target_id": "maria",
                "table_name": "messy",
                "pk_column": "id",
                "doc_map_json": json.dumps({**DOC_MAP, "doc_id": {"format": "messy:{id}"}}),
            }
        ],
    )
    code, status = sync(tmp_path, "messy")
    assert code == 0, status  # bad rows never abort a sync
    result = source_status(status)
    assert result["rows_skipped"] == 3 and result["docs_written"] == 10
    assert sorted((e["key"]["id"], e["reason"]) for e in result["errors"]) == [
        (11, "EMPTY_BODY"),
        (12, "UNDECODABLE"),
        (13, "OVERSIZE"),
    ]
    assert index_state(tmp_path)["docs"] == 10

    # A good row that turns bad leaves the index; fixing a bad one brings it in.
    maria_exec(mariadb_db, "UPDATE messy SET body = NULL WHERE id = 2", "UPDATE messy SET body = 'mended' WHERE id = 12")
    code, status = sync(tmp_path, "messy", full=True)
    state = index_state(tmp_path)
    assert "messy:2" not in state["doc_ids"] and state["bodies"]["messy:12"] == "mended"
    assert_consistent(state)


def test_unreachable_source_fails_unavailable_and_leaves_the_index(tmp_path: Path, maria_posts: dict[str, Any]) -> None:
    configure(
        tmp_path,
        targets=[maria_target(maria_posts), maria_target(maria_posts, "gone", port=1)],
        sources=[
            {"source_id": 1, "name": "posts", "target_id": "maria", "table_name": "posts", "pk_column": "id", "watermark_column": "updated_at"},
            {"source_id": 3, "name": "posts_gone", "target_id": "gone", "table_name": "posts", "pk_column": "id", "watermark_column": "updated_at",
             "doc_map_json": json.dumps({**DOC_MAP, "doc_id": {"format": "gone:{id}"}})},
        ],
    )  # fmt: skip
    assert sync(tmp_path, "posts")[0] == 0
    before = index_state(tmp_path)
    code, status = sync(tmp_path, "posts_gone")
    assert code == 1
    assert status["state"] == "failed" and status["error"]["code"] == "UNAVAILABLE"
    assert "password" not in json.dumps(status).lower()
    after = index_state(tmp_path)
    assert (after["docs"], after["chunks"], after["vectors"]) == (before["docs"], before["chunks"], before["vectors"])
    last_error = after["_conn"].execute("SELECT last_error FROM rag_sync_state WHERE source_id = 3").fetchall()[0][0]
    assert last_error.startswith("UNAVAILABLE")


# -- kill -9 in the middle of a sync -------------------------------------------------------
KILL_ROWS = 3000


@pytest.mark.slow
def test_kill_9_mid_sync_then_resume_gives_exact_counts(tmp_path: Path, mariadb_db: dict[str, Any]) -> None:
    maria_exec(
        mariadb_db,
        "CREATE TABLE big (id INT PRIMARY KEY, title VARCHAR(50), body TEXT, tags VARCHAR(10), score INT,"
        " updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), KEY (updated_at, id))",
    )
    maria_exec(
        mariadb_db,
        "INSERT INTO big (id, title, body, tags, score, updated_at) VALUES (%s, %s, %s, '', %s, TIMESTAMPADD(MICROSECOND, %s, '2026-01-01'))",
        args=[(i, f"row {i}", body_text(i, 40), i, i * 7 % 5000) for i in range(1, KILL_ROWS + 1)],
    )
    configure(
        tmp_path,
        targets=[maria_target(mariadb_db)],
        sources=[{"source_id": 4, "name": "big", "target_id": "maria", "table_name": "big", "pk_column": "id", "watermark_column": "updated_at",
                  "doc_map_json": json.dumps({**DOC_MAP, "doc_id": {"format": "big:{id}"}})}],
    )  # fmt: skip
    seed = int(os.environ.get("INGEST_KILL_SEED", random.randrange(1_000_000)))
    batches = KILL_ROWS // 50
    kill_after_docs = random.Random(seed).randrange(2, batches - 10) * 50
    script = f"import sys; from pathlib import Path; from gateway.assembly import open_config; from backends.retrieval.ingest.foreground import run_sync; sys.exit(run_sync(open_config(Path({str(tmp_path)!r})), 'big', progress=False, batch_rows=50))"
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if (tmp_path / "rag.db").exists():
                conn = apsw.Connection(str(tmp_path / "rag.db"), flags=apsw.SQLITE_OPEN_READONLY)
                conn.set_busy_timeout(1000)
                try:
                    written = conn.execute("SELECT count(*) FROM rag_documents").fetchall()[0][0]
                except apsw.SQLError:
                    written = 0  # schema not created yet
                finally:
                    conn.close()
                if written >= kill_after_docs:
                    break
            time.sleep(0.002)
        assert proc.poll() is None, (
            f"seed {seed}: the sync ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
        )
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    partial = index_state(tmp_path)
    assert 0 < partial["docs"] < KILL_ROWS, f"seed {seed}"
    assert_consistent(partial)  # each batch committed whole: never a chunk without its vector

    code, status = sync(tmp_path, "big")
    assert code == 0, (seed, status)
    resumed = source_status(status)
    assert resumed["rows_read"] <= KILL_ROWS - partial["docs"] + 50, f"seed {seed}: resumed from the cursor, not from the start"
    final = index_state(tmp_path)
    assert final["docs"] == KILL_ROWS and final["doc_ids"] == {f"big:{i}" for i in range(1, KILL_ROWS + 1)}, f"seed {seed}"
    expected_chunks = final["_conn"].execute("SELECT count(DISTINCT chunk_id) FROM rag_chunks").fetchall()[0][0]
    assert final["chunks"] == expected_chunks
    assert_consistent(final)
    # The interrupted job is reported as such, by any reader.
    cursor = final["_conn"].execute("SELECT * FROM rag_sync_jobs ORDER BY created_at")
    names = [d[0] for d in cursor.getdescription()]
    states = [status_from_row(dict(zip(names, row)))["state"] for row in cursor]
    assert states == ["interrupted", "ok"]


# -- PostgreSQL ----------------------------------------------------------------------------
def test_postgres_source_initial_update_delete_and_composite_key(tmp_path: Path, postgres_db: dict[str, Any]) -> None:
    import psycopg

    with psycopg.connect(**postgres_db, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE notes (tenant int, id int, title text, body text, tags text, score int,"
            " updated_at timestamptz NOT NULL DEFAULT clock_timestamp(), PRIMARY KEY (tenant, id))"
        )
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO notes (tenant, id, title, body, tags, score) VALUES (%s, %s, %s, %s, '', 0)",
                [(t, i, f"note {t}/{i}", body_text(t * 1000 + i, 30)) for t in (1, 2) for i in range(1, 31)],
            )
    doc_map = {**DOC_MAP, "doc_id": {"format": "notes:{tenant}/{id}"}}
    configure(
        tmp_path,
        targets=[{"target_id": "pg", "protocol": "pgsql", "host": postgres_db["host"], "port": postgres_db["port"], "database": postgres_db["dbname"], "auth_profile_id": "pg"}],
        sources=[{"source_id": 5, "name": "notes", "target_id": "pg", "table_name": "public.notes", "pk_column": "tenant,id", "watermark_column": "updated_at",
                  "where_sql": "tenant IN (1, 2)", "doc_map_json": json.dumps(doc_map)}],
    )  # fmt: skip
    code, status = sync(tmp_path, "notes", batch_rows=7)
    assert code == 0, status
    assert index_state(tmp_path)["docs"] == 60
    with psycopg.connect(**postgres_db, autocommit=True) as conn:
        conn.execute("UPDATE notes SET body = 'pelican feathers', updated_at = clock_timestamp() WHERE tenant = 2 AND id = 3")
        conn.execute("DELETE FROM notes WHERE tenant = 1 AND id <= 4")
        conn.execute(
            "INSERT INTO notes (tenant, id, title, body, tags, score) VALUES (3, 1, 'outside', 'filtered out by where_sql', '', 0)"
        )
    code, status = sync(tmp_path, "notes")
    assert code == 0, status
    delta = source_status(status)
    state = index_state(tmp_path)
    assert state["docs"] == 56 and delta["docs_deleted"] == 4 and delta["chunks_embedded"] == 1
    assert state["fts"]("pelican") == {"notes:2/3"} and "notes:3/1" not in state["doc_ids"]
    pk_json = state["_conn"].execute("SELECT pk_json FROM rag_documents WHERE doc_id = 'notes:2/3'").fetchall()[0][0]
    assert json.loads(pk_json) == {"tenant": 2, "id": 3}
    assert_consistent(state)
