"""Where the retrieval index lives: sqlite/ (rag.db in the data directory) or postgresql/
(pgvector, shared by a cluster), as rag-backend says. reader.py is what search reads either
through; records.py what ingestion hands either to write."""
