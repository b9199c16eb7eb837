"""RAG ingestion: stream rows from MySQL/MariaDB, PostgreSQL or SQLite sources into the index.

sources_config  the rag_sources admin table: validation at LOAD ... TO RUNTIME
sources         one streaming reader per engine (server-side cursors, bounded memory)
docmap          a source row -> a document (doc_id, title, body, metadata)
chunking        a document body -> chunks (chars or tokens, with overlap)
sync            one source's sync: read -> map/chunk -> embed -> write, as a pipeline
jobs            background jobs, one sync per source at a time across processes
foreground      one sync in the foreground with progress bars (`mcp-gateway rag sync`, the demo)
reconcile       a LOAD RAG SOURCES reaching the index (enabled flags, removed sources purged)
demo            the quick-start corpus (Python's own documentation) as a SQLite source
"""
