"""The deletion scan: which documents of a source are no longer in the source table.

Every key the source still has (rows matching where_sql) is mapped to its doc_id and put in a
scratch SQLite file in the data directory, and so are the index's documents of the source (read
in batches, from rag.db or PostgreSQL alike); the two are then anti-joined. Memory stays flat whatever the table size, and nothing is reported gone unless the
whole scan completed: a scan cut short (source down, shutdown) raises before any deletion.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from backends.retrieval.ingest.docmap import BadRow
from backends.retrieval.ingest.sources import SourceReader
from backends.retrieval.ingest.sources_config import SourceSpec
from gateway import sqlite
from gateway.errors import Unavailable

KEY_SCAN_BATCH_ROWS = 5000


def missing_doc_ids(
    reader: SourceReader, spec: SourceSpec, index: Any, scratch_dir: Path, *, batch_docs: int, stop: threading.Event
) -> Iterator[list[str]]:
    """Batches of doc_ids the index holds for `spec` whose rows the source no longer has."""
    scratch_path = Path(scratch_dir) / f"rag-keyscan-{spec.source_id}-{os.getpid()}.db"
    scratch_path.unlink(missing_ok=True)
    scratch = sqlite.connect(scratch_path)
    try:
        scratch.execute("PRAGMA journal_mode=OFF")  # a scratch file: nothing to recover after a crash
        scratch.execute("CREATE TABLE present (doc_id TEXT PRIMARY KEY) WITHOUT ROWID")
        scratch.execute("CREATE TABLE indexed (doc_id TEXT PRIMARY KEY) WITHOUT ROWID")
        for rows in reader.keys(spec.key_columns(), KEY_SCAN_BATCH_ROWS):
            if stop.is_set():
                raise Unavailable(f"sync of {spec.name!r} stopped: the gateway is shutting down")
            doc_ids = []
            for row in rows:
                with contextlib.suppress(BadRow):
                    doc_ids.append((spec.doc_map.doc_id(row),))
            with sqlite.transaction(scratch):
                scratch.executemany("INSERT OR IGNORE INTO present VALUES (?)", doc_ids)
        for doc_ids in index.iter_doc_ids(spec.source_id, KEY_SCAN_BATCH_ROWS):
            with sqlite.transaction(scratch):
                scratch.executemany("INSERT OR IGNORE INTO indexed VALUES (?)", [(d,) for d in doc_ids])
        gone = scratch.execute(
            "SELECT d.doc_id FROM indexed d WHERE NOT EXISTS (SELECT 1 FROM present p WHERE p.doc_id = d.doc_id) ORDER BY d.doc_id"
        )
        batch: list[str] = []
        for (doc_id,) in gone:
            batch.append(doc_id)
            if len(batch) >= batch_docs:
                yield batch
                batch = []
        if batch:
            yield batch
    finally:
        scratch.close()
        scratch_path.unlink(missing_ok=True)
