"""What the retrieval index keeps in the data directory beside rag.db, for backup and restore
(gateway/backup.py; RagHandler.data_files declares it)."""

from __future__ import annotations

import json

import apsw

from gateway import sqlite
from gateway.data_files import DataFiles


def close_interrupted_jobs(conn: apsw.Connection) -> None:
    """Sync jobs running when the backup was taken are failed in the restored copy: nothing runs them there."""
    exists = sqlite.scalar(conn, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'rag_sync_jobs'")
    if exists:
        conn.execute(
            "UPDATE rag_sync_jobs SET state = 'failed', error_json = ? WHERE state IN ('queued', 'running')",
            (json.dumps({"code": "UNAVAILABLE", "message": "interrupted by the backup this data directory was restored from"}),),
        )


RAG_DATA_FILES = DataFiles(
    scratch=("rag-keyscan-*",),  # a sync's key scan (ingest/keyscan.py), removed when it ends
    derived=("*.ann", "*.db.ann*"),  # the ANN snapshots beside rag.db (storage/sqlite/ann_snapshot.py)
    after_restore=close_interrupted_jobs,
)
