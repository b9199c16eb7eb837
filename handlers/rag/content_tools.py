"""rag.get_chunks and rag.get_docs: content by id (backends/retrieval/content.py), in the
order asked for, within rag-k_max and rag-response_max_bytes."""

from __future__ import annotations

from collections.abc import Callable

from backends.retrieval import content
from backends.retrieval.call import Call
from backends.retrieval.storage.reader import Index, reading
from gateway.tools import CallContext, tool
from handlers.rag.limits import ENVELOPE_BYTES, fit_to_bytes, ids_not_found
from handlers.rag.models import GetChunksIn, GetChunksOut, GetDocsIn, GetDocsOut, Stats


class ContentTools:
    def __init__(self, index: Callable[[], Index]) -> None:
        self._index = index  # the open index (UNAVAILABLE while it is not)

    @tool("rag.get_chunks", title="Fetch chunks", read_only=True)
    def get_chunks(self, args: GetChunksIn, ctx: CallContext) -> GetChunksOut:
        """Chunk text for grounding, by chunk_id, in the order given. Optional: diversity
        {lambda} re-orders by maximal marginal relevance (pushes near-duplicates down), and
        max_output_tokens caps the total body text (about 4 characters per token). Ids not in
        the index are listed in `missing`; NOT_FOUND if none is (its details.missing lists them),
        as in rag.get_docs."""
        index, call = self._index(), Call.of(ctx)
        wanted = list(dict.fromkeys(args.chunk_ids))
        served = wanted[: call.clamp(len(wanted), call.caps.k_max)]
        with reading(index, call) as reader:
            chunks, rowids = content.load_chunks(reader, served, args.return_)
            if not chunks:
                raise ids_not_found("chunk_ids", args.chunk_ids, wanted, served)
            if args.diversity is not None:
                chunks = content.mmr_order(reader, chunks, rowids, lam=args.diversity.lambda_)
        if args.max_output_tokens is not None:
            chunks, cut = content.apply_token_budget(chunks, args.max_output_tokens)
            call.truncated |= cut
        fitted, cut = fit_to_bytes(chunks, call.caps.response_max_bytes - ENVELOPE_BYTES, text_field="body")
        missing = [c for c in served if c not in rowids]
        return GetChunksOut(
            chunks=fitted,
            missing=missing,
            not_looked_up=len(wanted) - len(served),
            truncated=call.truncated or cut,
            stats=Stats(k_requested=len(args.chunk_ids), k_returned=len(fitted), ms=call.ms(), mode="chunks"),
        )

    @tool("rag.get_docs", title="Fetch documents", read_only=True)
    def get_docs(self, args: GetDocsIn, ctx: CallContext) -> GetDocsOut:
        """Whole canonical documents by doc_id (title, body, metadata, pk_json of the source
        row). Bodies can be long: prefer rag.get_chunks for grounding. Ids not in the index are
        listed in `missing`; NOT_FOUND if none is (its details.missing lists them), as in
        rag.get_chunks."""
        index, call = self._index(), Call.of(ctx)
        wanted = list(dict.fromkeys(args.doc_ids))
        served = wanted[: call.clamp(len(wanted), call.caps.k_max)]
        with reading(index, call) as reader:
            docs = content.load_docs(reader, served, args.return_)
        if not docs:
            raise ids_not_found("doc_ids", args.doc_ids, wanted, served)
        fitted, cut = fit_to_bytes(
            docs, call.caps.response_max_bytes - ENVELOPE_BYTES, text_field="body" if args.return_.include_body else None
        )
        found = {d["doc_id"] for d in docs}
        return GetDocsOut(
            docs=fitted,
            missing=[d for d in served if d not in found],
            not_looked_up=len(wanted) - len(served),
            truncated=call.truncated or cut,
            stats=Stats(k_requested=len(args.doc_ids), k_returned=len(fitted), ms=call.ms(), mode="docs"),
        )
