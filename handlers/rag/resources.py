"""/mcp/rag's MCP resources and prompts.

Resources (gateway/resources.py):
    rag://sources/{source}       a source: its doc_ids (the first MAX_SOURCE_DOCS by doc_id), enabled
    rag://documents/{doc_id}     one canonical document: title, body, metadata, pk_json of its row
resources/list shows the sources; documents are reached through the template (or a search's
doc_ids). A document's JSON is bounded by mcp-resources_max_bytes like every read.

Prompt: `answer_with_citations`: search the index, fetch the chunks kept, answer citing them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from backends.retrieval import content
from backends.retrieval.call import Call
from backends.retrieval.storage.reader import Index, reading
from gateway.call import CallContext
from gateway.errors import NotFound
from gateway.prompts import Prompt, PromptArgument
from gateway.resources import ResourceTemplate, resource, unknown
from handlers.rag.models import DocsReturn

SOURCE = ResourceTemplate(
    "rag://sources/{source}", "rag_source", "A RAG source", "A source of the index: whether it is enabled and its doc_ids."
)
DOCUMENT = ResourceTemplate(
    "rag://documents/{doc_id}", "rag_document", "A RAG document", "One canonical document: title, body, metadata, source row key."
)
MAX_SOURCE_DOCS = 1000


class RagResources:
    templates = (SOURCE, DOCUMENT)

    def __init__(self, index: Callable[[], Index], in_thread: Callable[..., Awaitable[Any]]) -> None:
        self._index = index  # the open index (UNAVAILABLE while it is not)
        self.in_thread = in_thread

    async def listing(self, ctx: CallContext, limit: int) -> tuple[list[dict[str, Any]], bool]:
        return await self.in_thread(self._listing, ctx, limit)

    async def read(self, uri: str, ctx: CallContext) -> Any:
        values = DOCUMENT.match(uri)
        if values is not None:
            return await self.in_thread(self._document, ctx, values["doc_id"])
        values = SOURCE.match(uri)
        if values is not None:
            return await self.in_thread(self._source, ctx, values["source"])
        raise unknown(uri, self.templates)

    def _listing(self, ctx: CallContext, limit: int) -> tuple[list[dict[str, Any]], bool]:
        with reading(self._index(), Call.of(ctx)) as reader:
            rows = list(reader.execute("SELECT name, enabled FROM rag_sources ORDER BY name LIMIT ?", (limit + 1,)))
        listed = [
            resource(SOURCE.expand(source=name), f"source {name}", f"RAG source {name}", "" if enabled else "disabled")
            for name, enabled in rows[:limit]
        ]
        return listed, len(rows) > limit

    def _source(self, ctx: CallContext, name: str) -> dict[str, Any]:
        with reading(self._index(), Call.of(ctx)) as reader:
            found = list(reader.execute("SELECT source_id, enabled FROM rag_sources WHERE name = ?", (name,)))
            if not found:
                raise NotFound(f"no RAG source {name!r}")
            source_id, enabled = found[0]
            docs = list(
                reader.execute(
                    "SELECT doc_id, title FROM rag_documents WHERE source_id = ? ORDER BY doc_id LIMIT ?",
                    (source_id, MAX_SOURCE_DOCS + 1),
                )
            )
        return {
            "source": name,
            "enabled": bool(enabled),
            "documents": [{"doc_id": d, "title": t, "uri": DOCUMENT.expand(doc_id=d)} for d, t in docs[:MAX_SOURCE_DOCS]],
            "truncated": len(docs) > MAX_SOURCE_DOCS,
        }

    def _document(self, ctx: CallContext, doc_id: str) -> dict[str, Any]:
        with reading(self._index(), Call.of(ctx)) as reader:
            docs = content.load_docs(reader, [doc_id], DocsReturn())
        if not docs:
            raise NotFound(f"no document {doc_id[:200]!r} in the index")
        return docs[0]


ANSWER_WITH_CITATIONS = Prompt(
    name="answer_with_citations",
    title="Answer a question with citations from the index",
    description="Search the RAG index, read the best chunks, and answer citing each chunk used.",
    arguments=(
        PromptArgument("question", "The question to answer.", required=True),
        PromptArgument("k", "How many chunks to keep (default 8)."),
    ),
    template=(
        "Question: {question}\n\n"
        "1. Call rag.search_hybrid with query set to the question and k={k} (8 when empty).\n"
        "2. Call rag.get_chunks with the chunk_ids of the results that look relevant (diversity lambda 0.5 keeps "
        "near-duplicates out; max_output_tokens bounds the text).\n"
        "3. Answer only from those chunks. After each sentence that uses a chunk, cite it as [chunk_id]; end with a "
        "list of the cited doc_ids and titles. If the chunks do not answer the question, say so instead of guessing."
    ),
)


def rag_prompts() -> list[Prompt]:
    return [ANSWER_WITH_CITATIONS]
