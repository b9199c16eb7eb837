"""The index in rag.db: tables and writes (index.py), FTS5 keyword search (fts.py), float32
vectors with an in-process usearch ANN (vector_store.py, ann_snapshot.py, ann_filter.py)."""
