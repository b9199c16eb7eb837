"""The query result cache: a layer inside the one read-only SQL path (backends/sql.py), so every
caller of it (run_sql_readonly, sample_rows, sample_distinct, profiling, llm.query, warm_cache)
shares it. `ResultCache` (cache.py) is what the app builds and offers as
`services.result_cache`; keys.py says what a result is keyed by; store.py is the interface
of the two stores, embedded.py (SQLite in the data directory) and redis_store.py.
"""

from backends.result_cache.cache import CACHE_VARIABLES, ResultCache

__all__ = ["CACHE_VARIABLES", "ResultCache"]
