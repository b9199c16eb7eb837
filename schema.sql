-- MCP Gateway schema. The code applies these sections; it keeps no other copy of this DDL.
--   admin: config.db (the memory and runtime layers, statistics) and disk.db (the disk layer)
--   rag:   rag.db (the retrieval index)
-- Every statement is idempotent (IF NOT EXISTS) so it runs on every start.

-- @section admin

-- ProxySQL's global_variables: values stored as text, typed by gateway/variables.py.
CREATE TABLE IF NOT EXISTS global_variables (
    variable_name  TEXT PRIMARY KEY NOT NULL,
    variable_value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runtime_global_variables (
    variable_name  TEXT PRIMARY KEY NOT NULL,
    variable_value TEXT NOT NULL
);

-- Bumped by every LOAD ... TO RUNTIME; workers poll it and rebuild their runtime snapshot.
CREATE TABLE IF NOT EXISTS runtime_state (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    version  INTEGER NOT NULL,
    loaded_at REAL NOT NULL
);

-- Per-tool usage, aggregated across workers (each worker flushes its deltas every second).
CREATE TABLE IF NOT EXISTS stats_mcp_query_tools_counters (
    endpoint   TEXT NOT NULL,
    tool       TEXT NOT NULL,
    schema     TEXT NOT NULL DEFAULT '',
    count      INTEGER NOT NULL DEFAULT 0,
    errors     INTEGER NOT NULL DEFAULT 0,
    first_seen REAL NOT NULL,
    last_seen  REAL NOT NULL,
    sum_time   INTEGER NOT NULL DEFAULT 0,  -- microseconds
    min_time   INTEGER NOT NULL DEFAULT 0,
    max_time   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (endpoint, tool, schema)
);

-- Normalised statements run by the query endpoint (filled by handlers/query).
CREATE TABLE IF NOT EXISTS stats_mcp_query_digest (
    tool_name   TEXT NOT NULL,
    target_id   TEXT NOT NULL,
    digest      TEXT NOT NULL,
    digest_text TEXT NOT NULL,
    count_star  INTEGER NOT NULL DEFAULT 0,
    first_seen  REAL NOT NULL,
    last_seen   REAL NOT NULL,
    sum_time    INTEGER NOT NULL DEFAULT 0,  -- microseconds
    min_time    INTEGER NOT NULL DEFAULT 0,
    max_time    INTEGER NOT NULL DEFAULT 0,
    histogram   TEXT NOT NULL DEFAULT '{}',  -- JSON {bucket_upper_us: count}, for percentiles
    PRIMARY KEY (tool_name, target_id, digest)
);

-- @section rag
