"""One source's sync, as a pipeline: read -> map and chunk -> embed -> write.

    reader thread    streams row batches from the source (bounded queue: memory stays flat)
    calling thread   maps rows to documents, chunks them, looks up stored chunk hashes and
                     embeds only the chunks whose text changed
    writer thread    commits each batch with write_batch: documents, chunks, FTS rows,
                     vectors AND the sync cursor in one transaction

So the model embeds batch N while batch N+1 is read and batch N-1 is written. Because the
cursor commits with the rows it covers, a sync killed at any point (kill -9 included)
restarts from the last committed batch; re-reading a row is harmless (upserts by doc_id,
unchanged chunks keep their vectors), so the end state is exactly the source's rows.

Change detection: with a watermark column, rows whose watermark is >= the cursor; without
one (append-only tables), rows whose primary key is > the cursor. Deletions (and rows that
stopped matching where_sql) are found by a key scan: every doc_id the source still has,
against every doc_id the index holds for the source.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from backends.retrieval.ingest.chunking import chunk_text
from backends.retrieval.ingest.docmap import BadRow, json_value
from backends.retrieval.ingest.keyscan import missing_doc_ids
from backends.retrieval.ingest.progress import SourceProgress
from backends.retrieval.ingest.sources import ReadPlan, SourceReader, open_reader
from backends.retrieval.ingest.sources_config import SourceSpec
from backends.retrieval.storage.postgresql.index import PgRagIndex
from backends.retrieval.storage.sqlite.index import ChunkRecord, DocumentRecord, RagIndex, normalise_timestamp
from backends.targets import Target
from gateway.errors import GatewayError, Unavailable

DELETE_BATCH_DOCS = 500
READ_QUEUE_BATCHES = 2  # read-ahead: bounded, so memory does not grow with the table
EMBED_CHUNKS_PER_WRITE = 256  # new embeddings per committed write batch (progress and crash granularity)
# The first write batch is small and each next one doubles up to EMBED_CHUNKS_PER_WRITE: with a
# slow model, a fresh index answers its first searches within seconds (the demo corpus on first
# start) instead of after a whole batch of 256 embeddings (~40 s on two busy cores).
FIRST_WRITE_CHUNKS = 16


@dataclass(frozen=True)
class SyncOptions:
    batch_rows: int = 500
    full: bool = False  # ignore the cursor: re-read every row (unchanged chunks still keep their vectors)
    key_scan: bool | None = None  # None: as key_scan_interval_s says; True/False: force
    pipelined: bool = True  # False: read, embed and write one after the other (the bench's baseline)


@dataclass
class _Batch:
    docs: list[DocumentRecord]
    delete_doc_ids: list[str]
    cursor: dict[str, Any] | None
    chunks_embedded: int
    chunks_reused: int


@dataclass
class _ReaderFailed:
    exc: BaseException


_END = object()


def utc_now_text() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def definition_fingerprint(spec: SourceSpec, model_id: str) -> str:
    """Changes when anything that shapes documents or chunks changes: then the cursor resets."""
    raw = spec.raw
    parts = [
        spec.table,
        ",".join(spec.pk_columns),
        spec.watermark_column,
        spec.where_sql,
        raw.get("doc_map_json") or "{}",
        raw.get("chunking_json") or "{}",
        spec.input_template,
        model_id,
    ]
    return hashlib.blake2b("\x00".join(parts).encode(), digest_size=8).hexdigest()


def content_hash(model_id: str, template: str, title: str, body: str) -> str:
    """Covers everything stored for a chunk's text and its vector: same hash, same vector."""
    return hashlib.blake2b(f"{model_id}\x00{template}\x00{title}\x00{body}".encode(), digest_size=16).hexdigest()


class SourceSync:
    """Runs one sync of one source against an open index, with an embedder of the index's model."""

    def __init__(
        self,
        spec: SourceSpec,
        target: Target,
        index: RagIndex | PgRagIndex,
        embedder: Any,
        progress: SourceProgress,
        *,
        options: SyncOptions = SyncOptions(),
        writer: ThreadPoolExecutor,
        in_transaction: Callable[[apsw.Connection], None] | None = None,
        on_progress: Callable[[SourceProgress], None] | None = None,
        stop: threading.Event | None = None,
        scratch_dir: Path | None = None,
    ) -> None:
        self.spec, self.target, self.index, self.embedder = spec, target, index, embedder
        self.scratch_dir = scratch_dir or Path(tempfile.gettempdir())  # the deletion scan's scratch file
        self.progress, self.options, self.writer = progress, options, writer
        self.extra_in_transaction = in_transaction
        self.on_progress = on_progress or (lambda _p: None)
        self.stop = stop or threading.Event()
        self.plan = ReadPlan(
            table=spec.table,
            columns=spec.select_columns(),
            pk_columns=spec.pk_columns,
            watermark_column=spec.watermark_column,
            where_sql=spec.where_sql,
        )
        self.fingerprint = definition_fingerprint(spec, embedder.model_id)
        self.mode = "watermark" if spec.watermark_column else "append_only"
        self._write_chunks = min(FIRST_WRITE_CHUNKS, EMBED_CHUNKS_PER_WRITE)  # ramps up: see FIRST_WRITE_CHUNKS

    # -- the run ---------------------------------------------------------------------------
    def run(self) -> SourceProgress:
        self.progress.start()
        self._mirror_source()
        try:
            reader = open_reader(self.target, self.plan, source_name=self.spec.name)
            try:
                state = self._load_state()
                cursor = state["cursor"]
                self.progress.phase = "counting"
                self.progress.rows_total = reader.count(cursor)
                self.progress.phase = "reading"
                self.on_progress(self.progress)
                self._read_changes(reader, cursor)
                if self._key_scan_due(state):
                    self.progress.phase = "key_scan"
                    self.on_progress(self.progress)
                    self._delete_missing(reader)
            finally:
                reader.close()
        except GatewayError as exc:
            self._fail(exc.code, exc.message)
            raise
        except Exception:
            self._fail("INTERNAL", "sync failed unexpectedly; see the gateway log")
            raise
        self._record_outcome(error=None)
        self.progress.finish("done")
        self.on_progress(self.progress)
        return self.progress

    def _fail(self, code: str, message: str) -> None:
        self._record_outcome(error=f"{code}: {message}")
        self.progress.error = {"code": code, "message": message}
        self.progress.finish("failed")

    def _mirror_source(self) -> None:
        """The index keeps its own copy of the source row (no credentials: only the target id)."""
        raw = self.spec.raw
        self.index.upsert_source(
            self.spec.source_id,
            self.spec.name,
            enabled=1 if self.spec.enabled else 0,
            backend_type=self.target.protocol,
            table_name=self.spec.table,
            pk_column=",".join(self.spec.pk_columns),
            where_sql=self.spec.where_sql,
            target_id=self.spec.target_id,
            doc_map_json=raw.get("doc_map_json") or "{}",
            chunking_json=raw.get("chunking_json") or "{}",
            embedding_json=raw.get("embedding_json") or "{}",
        )

    def _load_state(self) -> dict[str, Any]:
        rows = self.index.query(
            "SELECT cursor_json, last_key_scan_at FROM rag_sync_state WHERE source_id = ?", (self.spec.source_id,)
        )
        stored = json.loads(rows[0]["cursor_json"] or "{}") if rows else {}
        redo = self.options.full or stored.get("definition") != self.fingerprint
        cursor = None if redo else {k: v for k, v in stored.items() if k in ("watermark", "pk")} or None
        return {"cursor": cursor, "redefined": redo, "last_key_scan_at": rows[0]["last_key_scan_at"] if rows else None}

    def _key_scan_due(self, state: dict[str, Any]) -> bool:
        if self.options.key_scan is not None:
            return self.options.key_scan
        if state["redefined"] or not self.spec.key_scan_interval_s or not state["last_key_scan_at"]:
            return True
        last = dt.datetime.strptime(state["last_key_scan_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
        return (dt.datetime.now(dt.UTC) - last).total_seconds() >= self.spec.key_scan_interval_s

    # -- incremental read --------------------------------------------------------------------
    def _read_changes(self, reader: SourceReader, cursor: dict[str, Any] | None) -> None:
        if not self.options.pipelined:
            for rows in reader.rows(cursor, self.options.batch_rows):
                self.progress.rows_read += len(rows)
                for batch in self._prepare(rows, cursor):
                    self._stop_point()
                    cursor = batch.cursor
                    self._write(batch)
            return
        batches: queue.Queue[Any] = queue.Queue(maxsize=READ_QUEUE_BATCHES)
        abandon = threading.Event()
        thread = threading.Thread(
            target=self._read_ahead, args=(reader, cursor, batches, abandon), name=f"rag-read-{self.spec.name}", daemon=True
        )
        thread.start()
        pending: Future[None] | None = None
        try:
            while True:
                item = batches.get()
                if item is _END:
                    break
                if isinstance(item, _ReaderFailed):
                    raise item.exc
                self._stop_point()
                self.progress.rows_read += len(item)
                for batch in self._prepare(item, cursor):
                    self._stop_point()  # also between write batches: a read batch can take many seconds to embed
                    cursor = batch.cursor
                    if pending is not None:
                        pending.result()  # one write in flight: order kept, errors surface here
                    pending = self.writer.submit(self._write, batch)
            if pending is not None:
                pending.result()
                pending = None
        finally:
            abandon.set()
            if pending is not None:
                pending.exception()  # never leave a write running behind a failure
            while thread.is_alive():
                with contextlib.suppress(queue.Empty):
                    batches.get(timeout=0.05)  # unblock a reader waiting on a full queue
                thread.join(timeout=0.05)

    def _read_ahead(
        self, reader: SourceReader, cursor: dict[str, Any] | None, batches: queue.Queue[Any], abandon: threading.Event
    ) -> None:
        try:
            for rows in reader.rows(cursor, self.options.batch_rows):
                if not self._put(batches, rows, abandon):
                    return
            self._put(batches, _END, abandon)
        except BaseException as exc:  # noqa: BLE001 - handed to the consuming thread, which raises it
            self._put(batches, _ReaderFailed(exc), abandon)

    @staticmethod
    def _put(batches: queue.Queue[Any], item: Any, abandon: threading.Event) -> bool:
        while not abandon.is_set():
            try:
                batches.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _stop_point(self) -> None:
        """Where a sync stops when the gateway shuts down: the cursor of what is written is committed."""
        if self.stop.is_set():
            raise Unavailable(f"sync of {self.spec.name!r} stopped: the gateway is shutting down")

    def _prepare(self, rows: list[dict[str, Any]], cursor: dict[str, Any] | None) -> Iterator[_Batch]:
        """Rows -> documents with chunks, embedding the chunks whose text is not stored yet.

        A read batch is cut into write batches of at most EMBED_CHUNKS_PER_WRITE new embeddings:
        with a slow model, progress (and what a crash keeps) then advances every few seconds
        instead of once per read batch. Any prefix of the rows is a valid resume point.
        """
        doc_map = self.spec.doc_map
        entries: list[tuple[dict[str, Any], tuple[str, str, str, dict[str, Any]] | None, str | None]] = []
        for row in rows:
            try:
                entries.append((row, doc_map.map_row(row), None))
            except BadRow as bad:
                self.progress.bad_row(self._key_of(row), bad.reason, bad.message)
                gone_id = None
                with contextlib.suppress(BadRow):
                    gone_id = doc_map.doc_id(row)  # a row that went bad leaves the index
                entries.append((row, None, gone_id))
        stored = self.index.chunk_hashes([m[0] for _, m, _ in entries if m]) if entries else {}
        docs: list[DocumentRecord] = []
        deletes: list[str] = []
        to_embed: list[tuple[ChunkRecord, str]] = []
        for position, (row, mapped, gone_id) in enumerate(entries):
            if mapped is None:
                if gone_id is not None:
                    deletes.append(gone_id)
            else:
                docs.append(self._document(row, *mapped, stored, to_embed))
            if len(to_embed) >= self._write_chunks or position == len(entries) - 1:
                self._write_chunks = min(self._write_chunks * 2, EMBED_CHUNKS_PER_WRITE) if to_embed else self._write_chunks
                batch = self._seal(docs, deletes, to_embed, row, cursor)
                cursor = batch.cursor
                yield batch
                docs, deletes, to_embed = [], [], []

    def _document(
        self,
        row: dict[str, Any],
        doc_id: str,
        title: str,
        body: str,
        metadata: dict[str, Any],
        stored: dict[str, str],
        to_embed: list[tuple[ChunkRecord, str]],
    ) -> DocumentRecord:
        spec = self.spec
        model_id, template = self.embedder.model_id, spec.input_template
        chunks = []
        for index, piece in enumerate(chunk_text(body, spec.chunking)):
            chunk = ChunkRecord(
                chunk_id=f"{doc_id}#{index}",
                chunk_index=index,
                title=title,
                body=piece,
                metadata={"chunk_index": index},
                content_hash=content_hash(model_id, template, title, piece),
                embedding=None,
            )
            if stored.get(chunk.chunk_id) != chunk.content_hash:
                to_embed.append((chunk, template.format(title=title, body=piece)))
            chunks.append(chunk)
        updated = row.get(spec.watermark_column) if spec.watermark_column else None
        return DocumentRecord(
            doc_id=doc_id,
            source_id=spec.source_id,
            source_name=spec.name,
            pk_json=self._key_of(row),
            title=title,
            body=body,
            metadata=metadata,
            updated_at=normalise_timestamp(updated)
            if isinstance(updated, dt.datetime)
            else (None if updated is None else str(updated)),
            chunks=chunks,
        )

    def _seal(
        self,
        docs: list[DocumentRecord],
        deletes: list[str],
        to_embed: list[tuple[ChunkRecord, str]],
        last_row: dict[str, Any],
        cursor: dict[str, Any] | None,
    ) -> _Batch:
        self._embed(to_embed)
        total_chunks = sum(len(d.chunks) for d in docs)
        last_cursor = self.plan.cursor_of(last_row)
        if "watermark" in last_cursor and last_cursor["watermark"] is None:
            last_cursor = cursor  # a NULL watermark cannot be resumed from; keep the previous one
        return _Batch(docs, deletes, last_cursor, len(to_embed), total_chunks - len(to_embed))

    def _embed(self, to_embed: list[tuple[ChunkRecord, str]]) -> None:
        """One call per batch: the embedder sorts by length (less padding) and splits by its own batch_size."""
        if not to_embed:
            return
        began, began_cpu = time.perf_counter(), time.thread_time()
        vectors = self.embedder.embed([text for _, text in to_embed])
        self.progress.embed_s += time.perf_counter() - began
        self.progress.embed_cpu_s += time.thread_time() - began_cpu
        for (chunk, _), vector in zip(to_embed, vectors, strict=True):
            chunk.embedding = vector

    def _key_of(self, row: dict[str, Any]) -> dict[str, Any]:
        return {col: json_value(row.get(col), col) for col in self.spec.pk_columns}

    # -- writing -----------------------------------------------------------------------------
    def _write(self, batch: _Batch) -> None:
        """Runs in the writer thread: one transaction for the batch and the cursor."""
        p = self.progress
        after = {
            "docs_seen": p.rows_read,
            "docs_written": p.docs_written + len(batch.docs),
            "chunks_written": p.chunks_written + sum(len(d.chunks) for d in batch.docs),
            "chunks_embedded": p.chunks_embedded + batch.chunks_embedded,
            "chunks_reused": p.chunks_reused + batch.chunks_reused,
            "rows_skipped": p.rows_skipped,
        }
        cursor_json = json.dumps({"definition": self.fingerprint, **(batch.cursor or {})})

        before = (p.docs_written, p.chunks_written, p.chunks_embedded, p.chunks_reused)

        def bookkeeping(conn: apsw.Connection) -> None:
            self._save_state(conn, cursor_json=cursor_json, counts=after)
            # The counters move with the batch they count: what the job row records in this same
            # transaction (and what a search reads as `index.documents`) covers this batch, so
            # no reader sees its documents searchable beside a count that leaves them out.
            p.docs_written, p.chunks_written = after["docs_written"], after["chunks_written"]
            p.chunks_embedded, p.chunks_reused = after["chunks_embedded"], after["chunks_reused"]
            if self.extra_in_transaction is not None:
                self.extra_in_transaction(conn)

        try:
            self.index.write_batch(batch.docs, delete_doc_ids=batch.delete_doc_ids, in_transaction=bookkeeping)
        except BaseException:
            p.docs_written, p.chunks_written, p.chunks_embedded, p.chunks_reused = before  # rolled back
            raise
        self.on_progress(p)

    def _save_state(
        self, conn: apsw.Connection, *, cursor_json: str | None = None, counts: dict[str, int] | None = None, **extra: Any
    ) -> None:
        values: dict[str, Any] = {"mode": self.mode, "last_run_at": utc_now_text(), **(counts or {}), **extra}
        if cursor_json is not None:
            values["cursor_json"] = cursor_json
        columns = list(values)  # fixed names from this module, never from input
        conn.execute(
            f"INSERT INTO rag_sync_state (source_id, {', '.join(columns)}) VALUES (?, {', '.join('?' * len(columns))}) "
            f"ON CONFLICT (source_id) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in columns)}",
            (self.spec.source_id, *values.values()),
        )

    # -- deletions ---------------------------------------------------------------------------
    def _delete_missing(self, reader: SourceReader) -> None:
        """Remove documents whose rows are gone (see keyscan: nothing goes unless the scan completes)."""
        for doc_ids in missing_doc_ids(
            reader, self.spec, self.index, self.scratch_dir, batch_docs=DELETE_BATCH_DOCS, stop=self.stop
        ):
            self._delete_docs(doc_ids)
        self.index.run(
            lambda conn: self._save_state(conn, last_key_scan_at=utc_now_text(), docs_deleted=self.progress.docs_deleted)
        )

    def _delete_docs(self, doc_ids: list[str]) -> None:
        deleted = self.progress.docs_deleted + len(doc_ids)

        def bookkeeping(conn: apsw.Connection) -> None:
            self._save_state(conn, counts={"docs_deleted": deleted})
            if self.extra_in_transaction is not None:
                self.extra_in_transaction(conn)

        self.index.write_batch([], delete_doc_ids=doc_ids, in_transaction=bookkeeping)
        self.progress.docs_deleted = deleted
        self.on_progress(self.progress)

    def _record_outcome(self, *, error: str | None) -> None:
        p = self.progress
        counts = {
            "docs_seen": p.rows_read,
            "docs_written": p.docs_written,
            "docs_deleted": p.docs_deleted,
            "chunks_written": p.chunks_written,
            "chunks_embedded": p.chunks_embedded,
            "chunks_reused": p.chunks_reused,
            "rows_skipped": p.rows_skipped,
        }
        extra = {"last_error": error} if error else {"last_error": None, "last_ok_at": utc_now_text()}
        self.index.run(lambda conn: self._save_state(conn, counts=counts, **extra))
