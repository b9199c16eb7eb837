"""/mcp/rag: the retrieval tools of seed 000 over the index of backends/retrieval: <data_dir>/rag.db,
or PostgreSQL + pgvector shared by a cluster (rag-backend; the tools read either through
backends/retrieval/storage/reader.py).

The handler is the endpoint's metadata, its lifecycle (open the index, its embedder and the
sync jobs; keep the ANN level with other processes' syncs; apply LOAD RAG SOURCES) and its tool
groups, in tools/list order. Search tools return identifiers and scores; rag.get_chunks /
rag.get_docs return content. Every tool enforces the rag-* caps and reports `truncated` and `stats`.
"""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import anyio

from backends.retrieval import embeddings
from backends.retrieval.build_status import BuildWatch
from backends.retrieval.data_files import RAG_DATA_FILES
from backends.retrieval.embeddings import index_embedding_config, make_embedder
from backends.retrieval.embeddings.queries import QueryVectors
from backends.retrieval.ingest import demo_child
from backends.retrieval.ingest.demo import SOURCE_NAME, demo_to_sync, start_demo_in_background
from backends.retrieval.ingest.jobs import JobManager
from backends.retrieval.ingest.reconcile import apply_source_changes, source_states
from backends.retrieval.ingest.sources_config import RAG_SOURCES_MODULE
from backends.retrieval.job_liveness import this_member
from backends.retrieval.metrics import RagIndexCollector
from backends.retrieval.protocols import Embedder
from backends.retrieval.storage import open_index
from backends.retrieval.storage.reader import Index
from backends.retrieval.storage.sqlite.index import RagIndex
from backends.retrieval.variables import RAG_VARIABLES
from backends.sql import ReadOnlySql
from gateway.data_files import DataFiles
from gateway.errors import Unavailable
from gateway.prompts import Prompt
from gateway.resource_tools import ResourceTools
from gateway.runtime import Runtime
from gateway.services import Services
from gateway.store import ConfigModule, ConfigStore
from gateway.supervisor import SupervisorJob
from gateway.tools import ToolHandler
from gateway.variables import Variable
from handlers.rag.cli import add_commands
from handlers.rag.content_tools import ContentTools
from handlers.rag.embedding_tools import EmbeddingTools
from handlers.rag.fetch import FetchTools
from handlers.rag.opened import Opened
from handlers.rag.resources import RagResources, rag_prompts
from handlers.rag.search_tools import SearchTools
from handlers.rag.similarity_tools import SimilarityTools
from handlers.rag.stats_tools import StatsTools
from handlers.rag.sync_tools import SyncTools

FOLLOW_INTERVAL_S = 1.0  # how often each process looks for vectors other processes committed

log = logging.getLogger(__name__)


class RagHandler(ToolHandler):
    endpoint: ClassVar[str] = "rag"
    title: ClassVar[str] = "Retrieval index"
    instructions: ClassVar[str] = (
        "Search with rag.search_hybrid (best default), rag.search_fts (exact words) or rag.search_vector (meaning); "
        "then fetch text for the chunk_ids you keep with rag.get_chunks. Scores are higher-is-better in [0, 1]."
    )
    variables: ClassVar[tuple[Variable, ...]] = RAG_VARIABLES  # the retrieval engine's (backends/retrieval/variables.py)
    timeout_variable: ClassVar[str] = "rag-timeout_ms"
    example_call: ClassVar[tuple[str, dict[str, Any]] | None] = (
        "rag.search_hybrid",
        {"query": "how do I sort a list", "k": 3},
    )
    config_modules: ClassVar[tuple[ConfigModule, ...]] = (RAG_SOURCES_MODULE,)
    data_files: ClassVar[DataFiles | None] = RAG_DATA_FILES
    tool_groups: ClassVar[tuple[type, ...]] = (
        FetchTools,
        SyncTools,
        SearchTools,
        ContentTools,
        StatsTools,
        EmbeddingTools,
        SimilarityTools,
        ResourceTools,
    )

    def __init__(self, services: Services) -> None:
        super().__init__(services)
        self.opened = Opened()  # what init opens: the index, its embedder and query vectors, the sync jobs
        self._resources = RagResources(self.opened.open_index, self.in_thread)
        self._closing = threading.Event()  # stops a purge of removed sources and the follower at shutdown
        self._follower: threading.Thread | None = None
        # search results say when the index is building
        self.build_watch = BuildWatch(self._local_job_status, member=lambda: this_member(self.services.runtime.variables))

    def make_groups(self) -> list[object]:
        opened = self.opened
        return [
            FetchTools(opened.open_index, self.services.targets),
            SyncTools(opened.running_jobs),
            SearchTools(opened.open_index, opened.query_vectors, self.build_watch),
            ContentTools(opened.open_index),
            StatsTools(opened.open_index, opened.recent_jobs),
            EmbeddingTools(opened.open_embedder),
            SimilarityTools(self._read_only_sql, self.services.targets, opened.open_embedder),
            ResourceTools(self._resources),
        ]

    def _read_only_sql(self) -> ReadOnlySql:
        if self.services.sql is None:
            raise Unavailable("the read-only SQL path is not built (no database targets)")
        return self.services.sql

    def resources(self) -> RagResources:
        return self._resources

    def prompts(self, runtime: Runtime) -> list[Prompt]:
        return rag_prompts()

    @property
    def index(self) -> Index | None:
        return self.opened.index

    @property
    def embedder(self) -> Embedder | None:
        return self.opened.embedder

    def _local_job_status(self, job_id: str) -> dict[str, Any] | None:
        job = self.opened.jobs.jobs.get(job_id) if self.opened.jobs is not None else None
        return job.status() if job is not None else None

    # -- the command line ------------------------------------------------------------------
    @classmethod
    def add_cli(cls, commands: argparse._SubParsersAction, *, open_store: Callable[[str | None], ConfigStore]) -> None:
        add_commands(commands, open_store=open_store)

    @classmethod
    def add_serve_options(cls, serve: argparse.ArgumentParser) -> None:
        serve.add_argument("--no-demo", action="store_true", help="do not build the demo corpus on first start")

    @classmethod
    def before_serve(
        cls, args: argparse.Namespace, *, data_dir: Path, store: ConfigStore, first_start: bool
    ) -> list[SupervisorJob]:
        """The demo corpus: built on first start, synced in the background beside the workers."""
        if getattr(args, "workers", 1) <= 1:
            if not args.no_demo:
                start_demo_in_background(data_dir, store=store, first_start=first_start)
            return []
        jobs = []
        runtime = store.read_runtime()
        if runtime.var("rag-embedding_provider") == "local":
            # One model for the instance: the workers (and the demo sync) embed through the
            # supervisor, instead of one model per worker.
            jobs.append(SupervisorJob(f"{embeddings.__name__}:serve_model", {"config": index_embedding_config(runtime)}))
        if not args.no_demo and demo_to_sync(data_dir, store=store, first_start=first_start):
            jobs.append(SupervisorJob(f"{demo_child.__name__}:sync_in_child", {"data_dir": str(data_dir), "source": SOURCE_NAME}))
        return jobs

    @classmethod
    def scrape_collectors(cls, data_dir: Path, runtime: Callable[[], Any]) -> list[Any]:
        """The index's size and sync state, read from the index (rag.db or PostgreSQL, as rag-backend
        says) when /metrics is scraped (backends/retrieval/metrics.py)."""
        return [RagIndexCollector(Path(data_dir), runtime)]

    # -- lifecycle -------------------------------------------------------------------------
    async def init(self) -> None:
        await anyio.to_thread.run_sync(self._open)

    def _open(self) -> None:
        runtime, opened = self.services.runtime, self.opened
        embedder = make_embedder(index_embedding_config(runtime))
        if runtime.var("rag-embedding_provider") == "local":
            # Load the model now, not inside the first search: loading takes about a second,
            # which would spend most of that call's rag-timeout_ms.
            embedder.embed(["warm up"])
        opened.embedder = embedder
        opened.queries = QueryVectors(embedder, max_entries=runtime.var("rag-query_cache_entries"))
        index = open_index(runtime, self.services.data_dir, embedding_model_id=embedder.model_id, dim=embedder.dim)
        opened.index = index
        if isinstance(index, RagIndex):
            # Load (or rebuild) the ANN now: done inside the first search it would hold the search
            # lock for a second (snapshot) to minutes (rebuild at 1M vectors) and blow rag-timeout_ms.
            index.vectors.refresh(index.conn)
            self._follower = threading.Thread(target=self._follow_index, args=(index,), name="rag-ann-follower", daemon=True)
            self._follower.start()
        opened.jobs = JobManager(
            data_dir=self.services.data_dir,
            index=index,
            embedder=embedder,
            runtime=lambda: self.services.runtime,
            make_embedder=make_embedder,
        )
        opened.jobs.start_scheduler()

    def on_runtime_change(self, old: Any, new: Any) -> None:
        """A LOAD RAG SOURCES: enabled flags reach the index, removed sources are purged
        (backends/retrieval/ingest/reconcile.py)."""
        super().on_runtime_change(old, new)
        if self.opened.index is None or old is None:
            return
        before, after = old.table("runtime_rag_sources"), new.table("runtime_rag_sources")
        if before is not after and before != after:
            apply_source_changes(
                self.opened.index, self.services.data_dir, source_states(before), source_states(after), self._closing
            )

    def _follow_index(self, index: RagIndex) -> None:
        """Keep the ANN index level with syncs by other processes (another worker, the demo
        build, `mcp-gateway rag sync`), so a search never replays a large change log: one tiny
        query a second when nothing changed, batches of vectors.CATCH_UP_BATCH when it did."""
        while not self._closing.wait(FOLLOW_INTERVAL_S):
            try:
                index.vectors.catch_up(index.conn, stop=self._closing)
            except Exception:  # noqa: BLE001 - searches catch up on their own meanwhile
                log.warning("catching the ANN index up failed; retrying", exc_info=True)

    async def close(self) -> None:
        opened = self.opened
        self._closing.set()
        if self._follower is not None:
            await anyio.to_thread.run_sync(self._follower.join, 10)  # at most one batch in flight
        jobs, opened.jobs = opened.jobs, None
        if jobs is not None:
            await anyio.to_thread.run_sync(jobs.close)
        if opened.queries is not None:
            opened.queries.close()
        if opened.index is not None:
            index, opened.index = opened.index, None
            await anyio.to_thread.run_sync(index.close)
        await super().close()
