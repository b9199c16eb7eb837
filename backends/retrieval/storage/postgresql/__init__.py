"""The index on PostgreSQL + pgvector: tables, reads and writes (index.py), tsvector keyword
search (fts.py), and what ingestion and the jobs share with rag.db (ingest.py)."""
