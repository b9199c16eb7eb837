"""`mcp-gateway backup` / `restore`: a backup taken while `mcp-gateway rag sync` writes the index
restores to a consistent data directory, and the next sync resumes exactly where the copy ends."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest

from gateway import backup
from gateway.errors import InvalidArgument
from gateway.startup import prepare

REPO = Path(__file__).resolve().parents[2]
ROWS = 20_000
DOC_MAP = {"doc_id": {"format": "notes:{id}"}, "title": {"concat": [{"col": "title"}]}, "body": {"concat": [{"col": "body"}]}}


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args], env=env, capture_output=True, text=True, timeout=timeout)


def make_data_dir(tmp: Path) -> Path:
    corpus = tmp / "corpus.db"
    with sqlite3.connect(corpus) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, title TEXT, body TEXT)")
        conn.executemany(
            "INSERT INTO notes VALUES (?, ?, ?)",
            ((i, f"note {i}", f"heron number {i} stands in the reeds of pond {i % 97}") for i in range(1, ROWS + 1)),
        )
    config = tmp / "gateway.toml"
    config.write_text(
        '[variables]\n"rag-embedding_provider" = "hash"\n\n'
        f'[[mcp_target_profiles]]\ntarget_id = "files"\nprotocol = "sqlite"\ndatabase = "{corpus}"\n\n'
        '[[rag_sources]]\nsource_id = 1\nname = "notes"\ntarget_id = "files"\ntable_name = "notes"\npk_column = "id"\n'
        f"doc_map_json = '{json.dumps(DOC_MAP)}'\n"
    )
    data_dir = tmp / "data"
    prepare(data_dir, config_file=config).store.close()
    return data_dir


def documents(data_dir: Path) -> int:
    conn = apsw.Connection(str(data_dir / "rag.db"), flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(5000)
    try:
        return conn.execute("SELECT count(*) FROM rag_documents").fetchall()[0][0]
    except apsw.SQLError:  # the sync has not created its tables yet
        return 0
    finally:
        conn.close()


@pytest.mark.slow
def test_backup_taken_during_a_sync_restores_consistently_and_the_next_sync_resumes(tmp_path: Path):
    data_dir = make_data_dir(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    sync = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "rag", "sync", "--data-dir", str(data_dir), "--quiet"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not ((data_dir / "rag.db").exists() and documents(data_dir) > 0):
            assert sync.poll() is None, sync.communicate()
            assert time.monotonic() < deadline, "the sync wrote nothing within 60 s"
            time.sleep(0.05)
        manifest = backup.backup(data_dir, tmp_path / "backup")  # in this process: taken in milliseconds
        assert sync.poll() is None, "the sync ended before the backup did: the backup was not taken during a sync"
        out, err = sync.communicate(timeout=120)
        assert sync.returncode == 0, err
    finally:
        if sync.poll() is None:
            sync.kill()
            sync.wait()
    assert {f["name"] for f in manifest["files"]} >= {"config.db", "disk.db", "rag.db"}

    restored = tmp_path / "restored"
    done = cli("restore", str(tmp_path / "backup"), "--data-dir", str(restored))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["checked"]["rag.db"] == "ok"
    conn = apsw.Connection(str(restored / "rag.db"))
    in_backup = conn.execute("SELECT count(*) FROM rag_documents").fetchall()[0][0]
    assert 0 < in_backup < ROWS
    # The copy is one commit: documents, chunks, keyword index and cursor agree.
    assert (
        conn.execute(
            "SELECT count(*) FROM rag_documents d WHERE NOT EXISTS (SELECT 1 FROM rag_chunks c WHERE c.doc_id = d.doc_id)"
        ).fetchall()[0][0]
        == 0
    )
    conn.execute("INSERT INTO rag_fts_chunks (rag_fts_chunks) VALUES ('integrity-check')")
    (docs_written,) = conn.execute("SELECT docs_written FROM rag_sync_state WHERE source_id = 1").fetchall()[0]
    assert docs_written == in_backup
    states = {row[0] for row in conn.execute("SELECT state FROM rag_sync_jobs").fetchall()}
    assert states == {"failed"}, states  # the job copied mid-run is closed, not left "running"
    conn.close()

    resumed = cli("rag", "sync", "--data-dir", str(restored), "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    (source,) = json.loads(resumed.stdout)["sources"]
    assert source["rows_read"] == ROWS - in_backup  # from the restored cursor, nothing read twice
    assert documents(restored) == ROWS
    again = cli("backup", "--data-dir", str(restored), str(tmp_path / "backup-2"))  # the command line, too
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["files"]


def test_restore_refuses_a_directory_a_gateway_serves_and_a_non_empty_one(tmp_path: Path):
    data_dir = tmp_path / "data"
    prepare(data_dir).store.close()
    made = backup.backup(data_dir, tmp_path / "backup")
    assert {f["name"] for f in made["files"]} == {"config.db", "disk.db"}
    (data_dir / "gateway.json").write_text(json.dumps({"pid": os.getpid(), "port": 1}))
    with pytest.raises(InvalidArgument, match="stop it before restoring"):
        backup.restore(tmp_path / "backup", data_dir, force=True)
    (data_dir / "gateway.json").unlink()
    with pytest.raises(InvalidArgument, match="--force"):
        backup.restore(tmp_path / "backup", data_dir)
    (tmp_path / "backup" / "disk.db").write_bytes(b"damaged")
    with pytest.raises(InvalidArgument, match="differs from the manifest"):
        backup.restore(tmp_path / "backup", tmp_path / "elsewhere")


def test_backup_and_restore_follow_what_the_handlers_declare(tmp_path: Path):
    """gateway/backup.py knows no endpoint's files: the RAG handler declares its scratch databases,
    its derived ANN snapshots and the jobs a restore closes (RagHandler.data_files)."""
    from gateway.assembly import data_files
    from handlers.rag import RagHandler

    assert RagHandler.data_files in data_files()
    data_dir = tmp_path / "data"
    prepare(data_dir).store.close()
    with sqlite3.connect(data_dir / "rag-keyscan-1-99.db") as conn:  # a running sync's scratch copy
        conn.execute("CREATE TABLE keys (k)")
    made = backup.backup(data_dir, tmp_path / "backup")
    assert {f["name"] for f in made["files"]} == {"config.db", "disk.db"}
    (data_dir / "rag.db.ann").mkdir()  # derived from rag.db: a forced restore removes it with rag.db
    (data_dir / "notes.txt").write_text("not the gateway's")
    backup.restore(tmp_path / "backup", data_dir, force=True)
    assert not (data_dir / "rag.db.ann").exists() and not (data_dir / "rag-keyscan-1-99.db").exists()
    assert (data_dir / "notes.txt").exists()
    # The knowledge is the declaration's: with none, the scratch database is copied as any other.
    with sqlite3.connect(data_dir / "rag-keyscan-1-99.db") as conn:
        conn.execute("CREATE TABLE keys (k)")
    undeclared = backup.backup(data_dir, tmp_path / "backup-2", files=[])
    assert "rag-keyscan-1-99.db" in {f["name"] for f in undeclared["files"]}
