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

-- With mcp-cluster_dsn: the cluster version of each module this instance serves (gateway/cluster.py).
CREATE TABLE IF NOT EXISTS cluster_applied (
    module  TEXT PRIMARY KEY NOT NULL,
    version INTEGER NOT NULL
);

-- MCP PROFILES (gateway/targets.py): credentials and routable targets of /mcp/query.
-- db_password holds the secret itself, or a reference resolved when pools are built:
-- 'env:NAME' (an environment variable) or 'file:/path' (first line of a file).
CREATE TABLE IF NOT EXISTS mcp_auth_profiles (
    auth_profile_id TEXT PRIMARY KEY NOT NULL,
    db_username     TEXT NOT NULL DEFAULT '',
    db_password     TEXT NOT NULL DEFAULT '',
    default_schema  TEXT NOT NULL DEFAULT '',
    use_ssl         INTEGER NOT NULL DEFAULT 0,
    ssl_mode        TEXT NOT NULL DEFAULT '',  -- disable|prefer|require|verify-ca|verify-full
    comment         TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS runtime_mcp_auth_profiles (
    auth_profile_id TEXT PRIMARY KEY NOT NULL,
    db_username     TEXT NOT NULL DEFAULT '',
    db_password     TEXT NOT NULL DEFAULT '',  -- as stored (a reference stays a reference)
    default_schema  TEXT NOT NULL DEFAULT '',
    use_ssl         INTEGER NOT NULL DEFAULT 0,
    ssl_mode        TEXT NOT NULL DEFAULT '',
    comment         TEXT NOT NULL DEFAULT ''
);
-- protocol is not CHECKed here on purpose: a bad one loads as effective=0 with a skip_reason.
CREATE TABLE IF NOT EXISTS mcp_target_profiles (
    target_id       TEXT PRIMARY KEY NOT NULL,
    protocol        TEXT NOT NULL,             -- mysql|pgsql|sqlite
    host            TEXT NOT NULL DEFAULT '',
    port            INTEGER NOT NULL DEFAULT 0, -- 0: the protocol's default port
    database        TEXT NOT NULL DEFAULT '',  -- database name, or the file path for sqlite
    auth_profile_id TEXT NOT NULL DEFAULT '',  -- may be empty for sqlite
    description     TEXT NOT NULL DEFAULT '',
    max_rows        INTEGER NOT NULL DEFAULT 200,
    timeout_ms      INTEGER NOT NULL DEFAULT 2000,
    allow_explain   INTEGER NOT NULL DEFAULT 1,
    allow_explain_analyze INTEGER NOT NULL DEFAULT 0, -- 1: explain_sql may run analyze=true (runs the statement)
    allow_discovery INTEGER NOT NULL DEFAULT 1,
    active          INTEGER NOT NULL DEFAULT 1,
    comment         TEXT NOT NULL DEFAULT '',
    cache_ttl_ms    INTEGER NOT NULL DEFAULT 0 -- ms results are served from the result cache; 0: not cached
);
CREATE TABLE IF NOT EXISTS runtime_mcp_target_profiles (
    target_id       TEXT PRIMARY KEY NOT NULL,
    protocol        TEXT NOT NULL,
    host            TEXT NOT NULL DEFAULT '',
    port            INTEGER NOT NULL DEFAULT 0,
    database        TEXT NOT NULL DEFAULT '',
    auth_profile_id TEXT NOT NULL DEFAULT '',
    description     TEXT NOT NULL DEFAULT '',
    max_rows        INTEGER NOT NULL DEFAULT 200,
    timeout_ms      INTEGER NOT NULL DEFAULT 2000,
    allow_explain   INTEGER NOT NULL DEFAULT 1,
    allow_explain_analyze INTEGER NOT NULL DEFAULT 0,
    allow_discovery INTEGER NOT NULL DEFAULT 1,
    active          INTEGER NOT NULL DEFAULT 1,
    comment         TEXT NOT NULL DEFAULT '',
    cache_ttl_ms    INTEGER NOT NULL DEFAULT 0,
    effective       INTEGER NOT NULL DEFAULT 0, -- 1: serving; 0: see skip_reason
    skip_reason     TEXT NOT NULL DEFAULT '',
    privilege_warnings TEXT NOT NULL DEFAULT '[]' -- JSON list: what the account can do beyond reading
);
-- Per-user database accounts: an OAuth caller matching `caller` (its subject, or claim=value; a
-- list claim matches any of its values) reaches target_id with auth_profile_id's account instead of
-- the target's own, so the database's own grants apply to that user. The first active match by rule_id wins.
CREATE TABLE IF NOT EXISTS mcp_identity_profiles (
    rule_id         INTEGER PRIMARY KEY NOT NULL,
    active          INTEGER NOT NULL DEFAULT 1,
    target_id       TEXT NOT NULL,
    caller          TEXT NOT NULL,
    auth_profile_id TEXT NOT NULL,
    comment         TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS runtime_mcp_identity_profiles (
    rule_id         INTEGER PRIMARY KEY NOT NULL,
    active          INTEGER NOT NULL DEFAULT 1,
    target_id       TEXT NOT NULL,
    caller          TEXT NOT NULL,
    auth_profile_id TEXT NOT NULL,
    comment         TEXT NOT NULL DEFAULT ''
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
-- Who ran each digest: the OAuth subjects (static-token calls are not listed), merged like the digests.
CREATE TABLE IF NOT EXISTS stats_mcp_query_digest_callers (
    tool_name  TEXT NOT NULL,
    target_id  TEXT NOT NULL,
    digest     TEXT NOT NULL,
    subject    TEXT NOT NULL,
    count_star INTEGER NOT NULL DEFAULT 0,
    last_seen  REAL NOT NULL,
    PRIMARY KEY (tool_name, target_id, digest, subject)
);

-- MCP QUERY RULES (backends/rules.py): ProxySQL's 18 columns and its cache_ttl; NULL/'' filters match anything.
CREATE TABLE IF NOT EXISTS mcp_query_rules (
    rule_id              INTEGER PRIMARY KEY NOT NULL,
    active               INTEGER NOT NULL DEFAULT 0,
    username             TEXT,     -- db_username of the resolved auth profile
    target_id            TEXT,
    schemaname           TEXT,
    tool_name            TEXT,     -- run_sql_readonly, explain_sql, sample_rows, sample_distinct
    match_pattern        TEXT,     -- Python regular expression searched in the SQL
    negate_match_pattern INTEGER NOT NULL DEFAULT 0,
    re_modifiers         TEXT DEFAULT 'CASELESS',  -- CASELESS, GLOBAL (comma separated)
    flagIN               INTEGER NOT NULL DEFAULT 0,
    flagOUT              INTEGER,
    replace_pattern      TEXT,
    timeout_ms           INTEGER,
    error_msg            TEXT,
    OK_msg               TEXT,
    log                  INTEGER,
    apply                INTEGER NOT NULL DEFAULT 0,
    comment              TEXT,
    cache_ttl            INTEGER,  -- ms the result of a matched statement is cached; 0: never; NULL: the target's cache_ttl_ms
    caller               TEXT      -- who is asking (an OAuth caller): its subject, or claim=value (a list claim: one of its values)
);
CREATE TABLE IF NOT EXISTS runtime_mcp_query_rules (
    rule_id              INTEGER PRIMARY KEY NOT NULL,
    active               INTEGER NOT NULL DEFAULT 0,
    username             TEXT,
    target_id            TEXT,
    schemaname           TEXT,
    tool_name            TEXT,
    match_pattern        TEXT,
    negate_match_pattern INTEGER NOT NULL DEFAULT 0,
    re_modifiers         TEXT DEFAULT 'CASELESS',
    flagIN               INTEGER NOT NULL DEFAULT 0,
    flagOUT              INTEGER,
    replace_pattern      TEXT,
    timeout_ms           INTEGER,
    error_msg            TEXT,
    OK_msg               TEXT,
    log                  INTEGER,
    apply                INTEGER NOT NULL DEFAULT 0,
    comment              TEXT,
    cache_ttl            INTEGER,
    caller               TEXT
);
-- Hits per rule and route, aggregated across workers (each flushes its deltas at most once a second).
CREATE TABLE IF NOT EXISTS stats_mcp_query_rules (
    rule_id   INTEGER NOT NULL,
    username  TEXT NOT NULL DEFAULT '',
    target_id TEXT NOT NULL DEFAULT '',
    hits      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (rule_id, username, target_id)
);

-- RAG SOURCES (backends/retrieval/ingest/sources_config.py): what ingestion reads into the index.
-- No credentials here: a source reaches its database through target_id, whose auth profile
-- holds them. JSON columns follow RAG_POC (doc_map_json, chunking_json, embedding_json).
CREATE TABLE IF NOT EXISTS rag_sources (
    source_id           INTEGER PRIMARY KEY,
    name                TEXT NOT NULL UNIQUE,
    enabled             INTEGER NOT NULL DEFAULT 1,
    target_id           TEXT NOT NULL,              -- an MCP PROFILES target: where and as whom
    table_name          TEXT NOT NULL,              -- table or schema.table
    pk_column           TEXT NOT NULL,              -- primary key column(s), comma separated
    watermark_column    TEXT NOT NULL DEFAULT '',   -- updated_at-style column; '' = append-only (pk cursor)
    where_sql           TEXT NOT NULL DEFAULT '',   -- optional row filter, ANDed to every sync query
    doc_map_json        TEXT NOT NULL DEFAULT '{}',
    chunking_json       TEXT NOT NULL DEFAULT '{}',
    embedding_json      TEXT NOT NULL DEFAULT '{}',
    sync_interval_s     INTEGER NOT NULL DEFAULT 0, -- > 0: sync periodically in the background
    key_scan_interval_s INTEGER NOT NULL DEFAULT 0, -- deletion scan at most this often; 0: every sync
    comment             TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS runtime_rag_sources (
    source_id           INTEGER PRIMARY KEY,
    name                TEXT NOT NULL UNIQUE,
    enabled             INTEGER NOT NULL DEFAULT 1,
    target_id           TEXT NOT NULL,              -- an MCP PROFILES target: where and as whom
    table_name          TEXT NOT NULL,              -- table or schema.table
    pk_column           TEXT NOT NULL,              -- primary key column(s), comma separated
    watermark_column    TEXT NOT NULL DEFAULT '',   -- updated_at-style column; '' = append-only (pk cursor)
    where_sql           TEXT NOT NULL DEFAULT '',   -- optional row filter, ANDed to every sync query
    doc_map_json        TEXT NOT NULL DEFAULT '{}',
    chunking_json       TEXT NOT NULL DEFAULT '{}',
    embedding_json      TEXT NOT NULL DEFAULT '{}',
    sync_interval_s     INTEGER NOT NULL DEFAULT 0, -- > 0: sync periodically in the background
    key_scan_interval_s INTEGER NOT NULL DEFAULT 0, -- deletion scan at most this often; 0: every sync
    comment             TEXT NOT NULL DEFAULT ''
);

-- MCP TOOLS (backends/custom_tools.py): admin-defined parameterised SQL tools, and toolsets
-- (admin-defined endpoints at /mcp/<endpoint>, each with its own token). LOAD MCP TOOLS TO RUNTIME
-- validates every row against the targets that serve (the statement in the target's dialect,
-- the read-only check, placeholders against parameters) or changes nothing.
CREATE TABLE IF NOT EXISTS mcp_tools (
    tool_name     TEXT PRIMARY KEY,               -- what tools/list shows; [a-z][a-z0-9_]*, unique across endpoints
    endpoint      TEXT NOT NULL DEFAULT 'query',  -- one of the seven endpoints or an mcp_endpoints toolset
    target_id     TEXT NOT NULL,                  -- the MCP PROFILES target it runs on
    description   TEXT NOT NULL DEFAULT '',       -- what the model reads: required, at most 2000 characters
    statement     TEXT NOT NULL DEFAULT '',       -- one read-only statement with :named placeholders
    parameters    TEXT NOT NULL DEFAULT '[]',     -- JSON list: {name, type, required, default, description, bounds}
    max_rows      INTEGER,                        -- NULL: the target's (never above it)
    timeout_ms    INTEGER,                        -- NULL: the target's (never above it)
    cache_ttl_ms  INTEGER,                        -- NULL: the target's cache_ttl_ms; 0: never cached
    active        INTEGER NOT NULL DEFAULT 1,
    comment       TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS runtime_mcp_tools (
    tool_name     TEXT PRIMARY KEY,               -- what tools/list shows; [a-z][a-z0-9_]*, unique across endpoints
    endpoint      TEXT NOT NULL DEFAULT 'query',  -- one of the seven endpoints or an mcp_endpoints toolset
    target_id     TEXT NOT NULL,                  -- the MCP PROFILES target it runs on
    description   TEXT NOT NULL DEFAULT '',       -- what the model reads: required, at most 2000 characters
    statement     TEXT NOT NULL DEFAULT '',       -- one read-only statement with :named placeholders
    parameters    TEXT NOT NULL DEFAULT '[]',     -- JSON list: {name, type, required, default, description, bounds}
    max_rows      INTEGER,                        -- NULL: the target's (never above it)
    timeout_ms    INTEGER,                        -- NULL: the target's (never above it)
    cache_ttl_ms  INTEGER,                        -- NULL: the target's cache_ttl_ms; 0: never cached
    active        INTEGER NOT NULL DEFAULT 1,
    comment       TEXT NOT NULL DEFAULT '',
    compiled_sql  TEXT NOT NULL DEFAULT ''        -- the statement with each placeholder as its marker (backends/binding.py)
);
CREATE TABLE IF NOT EXISTS mcp_endpoints (
    endpoint      TEXT PRIMARY KEY,               -- served at /mcp/<endpoint>; not one of the seven
    title         TEXT NOT NULL DEFAULT '',
    instructions  TEXT NOT NULL DEFAULT '',       -- what initialize answers as instructions
    builtin_tools TEXT NOT NULL DEFAULT '',       -- built-in tools it serves: 'query/run_sql_readonly@support_db ...'
    auth_tokens   TEXT NOT NULL DEFAULT '',       -- its bearer token(s), comma separated (or env:NAME / file:/path)
    tools_disabled TEXT NOT NULL DEFAULT '',      -- tool names or globs it does not serve
    active        INTEGER NOT NULL DEFAULT 1,
    comment       TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS runtime_mcp_endpoints (
    endpoint      TEXT PRIMARY KEY,               -- served at /mcp/<endpoint>; not one of the seven
    title         TEXT NOT NULL DEFAULT '',
    instructions  TEXT NOT NULL DEFAULT '',       -- what initialize answers as instructions
    builtin_tools TEXT NOT NULL DEFAULT '',       -- built-in tools it serves: 'query/run_sql_readonly@support_db ...'
    auth_tokens   TEXT NOT NULL DEFAULT '',       -- its bearer token(s), comma separated (or env:NAME / file:/path)
    tools_disabled TEXT NOT NULL DEFAULT '',      -- tool names or globs it does not serve
    active        INTEGER NOT NULL DEFAULT 1,
    comment       TEXT NOT NULL DEFAULT ''
);

-- MCP PROMPTS (gateway/prompts.py): admin-defined MCP prompts (prompts/list, prompts/get) per
-- endpoint. LOAD MCP PROMPTS TO RUNTIME checks every row (each placeholder declared, each argument used).
CREATE TABLE IF NOT EXISTS mcp_prompts (
    endpoint      TEXT NOT NULL DEFAULT 'query',  -- the endpoint (or toolset) whose prompts/list shows it
    prompt_name   TEXT NOT NULL,                  -- [a-z][a-z0-9_-]*; shadows a built-in prompt of that name
    title         TEXT NOT NULL DEFAULT '',
    description   TEXT NOT NULL DEFAULT '',       -- required, at most 2000 characters
    arguments     TEXT NOT NULL DEFAULT '[]',     -- JSON list: {name, description, required}
    template      TEXT NOT NULL DEFAULT '',       -- the user message, {argument} placeholders
    active        INTEGER NOT NULL DEFAULT 1,
    comment       TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (endpoint, prompt_name)
);
CREATE TABLE IF NOT EXISTS runtime_mcp_prompts (
    endpoint      TEXT NOT NULL DEFAULT 'query',  -- the endpoint (or toolset) whose prompts/list shows it
    prompt_name   TEXT NOT NULL,                  -- [a-z][a-z0-9_-]*; shadows a built-in prompt of that name
    title         TEXT NOT NULL DEFAULT '',
    description   TEXT NOT NULL DEFAULT '',       -- required, at most 2000 characters
    arguments     TEXT NOT NULL DEFAULT '[]',     -- JSON list: {name, description, required}
    template      TEXT NOT NULL DEFAULT '',       -- the user message, {argument} placeholders
    active        INTEGER NOT NULL DEFAULT 1,
    comment       TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (endpoint, prompt_name)
);

-- @section rag_vectors
-- Vector storage of rag.db (backends/retrieval/storage/sqlite/vector_store.py applies it via vector_schema(dim); {dim} is the
-- index's embedding dimension). SQLite holds the truth: float32 L2-normalised vectors in a plain
-- rowid table, because a vec0 point lookup by rowid measured ~300 us against ~13 us here, and the
-- ANN index rescores its candidates with exact floats (bench/README.md). The in-process ANN index
-- (rag.db.ann/) is derived: it catches up from rag_vec_changes, and is rebuilt from this table if
-- its snapshot is missing, corrupt, or belongs to another generation of the database.
CREATE TABLE IF NOT EXISTS rag_vec_chunks (
    chunk_rowid INTEGER PRIMARY KEY,          -- = rag_chunks.chunk_rowid
    embedding   BLOB NOT NULL CHECK (length(embedding) = 4 * {dim})  -- float32[{dim}], unit length
);
-- Append-only change log, written in the same transaction as rag_vec_chunks; each process's ANN
-- index remembers the last seq it applied. Replaying is idempotent: a change means "re-read this
-- rowid" (present: upsert, absent: delete), so order within a batch does not matter.
CREATE TABLE IF NOT EXISTS rag_vec_changes (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    chunk_rowid INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS rag_vec_meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);
INSERT OR IGNORE INTO rag_vec_meta (key, value) VALUES ('dim', '{dim}');
-- A new random id per database: an ANN snapshot from a deleted-and-recreated rag.db is refused.
INSERT OR IGNORE INTO rag_vec_meta (key, value) VALUES ('generation', lower(hex(randomblob(16))));
-- Log rows with seq <= this were deleted (compact_changes); a process behind it reloads a snapshot.
INSERT OR IGNORE INTO rag_vec_meta (key, value) VALUES ('trimmed_through_seq', '0');

-- @section rag
-- The retrieval index (rag.db; backends/retrieval/storage/sqlite/index.py applies this section, then the rag_vectors
-- section for the index's dimension). rag_chunks is the truth for retrieval: rag_fts_chunks is
-- an external-content FTS5 index over it kept in step by triggers, and the vector rows are
-- written by backends/retrieval/storage/sqlite/vector_store.py inside the same transaction as the chunk rows.
-- Documents are deleted, never flagged: a soft-deleted row would have to be filtered out of
-- every FTS and ANN search, which is how a stale hit leaks.

-- Key/value facts about this index: schema_version (migrated forward on open), embedding_model
-- and embedding_dim (a query embedded by another model is refused), created_at.
CREATE TABLE IF NOT EXISTS rag_meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);

-- A source as the index knows it (mirrored from the RAG SOURCES admin table by ingestion).
CREATE TABLE IF NOT EXISTS rag_sources (
    source_id      INTEGER PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE,
    enabled        INTEGER NOT NULL DEFAULT 1,
    backend_type   TEXT NOT NULL DEFAULT '',   -- mysql|pgsql|sqlite
    backend_host   TEXT NOT NULL DEFAULT '',
    backend_port   INTEGER NOT NULL DEFAULT 0,
    backend_user   TEXT NOT NULL DEFAULT '',
    backend_pass   TEXT NOT NULL DEFAULT '',   -- blueprint column; ingestion stores a reference, not the secret
    backend_db     TEXT NOT NULL DEFAULT '',
    table_name     TEXT NOT NULL DEFAULT '',
    pk_column      TEXT NOT NULL DEFAULT '',
    where_sql      TEXT NOT NULL DEFAULT '',
    target_id      TEXT NOT NULL DEFAULT '',   -- /mcp/query target that rag.fetch_from_source reads through
    doc_map_json   TEXT NOT NULL DEFAULT '{}',
    chunking_json  TEXT NOT NULL DEFAULT '{}',
    embedding_json TEXT NOT NULL DEFAULT '{}',
    created_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
    updated_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
);

-- Canonical documents. The hot filter fields of metadata_json (Score, PostTypeId, CreationDate,
-- Tags) are denormalised into columns here and on every chunk, so filters run in SQL.
CREATE TABLE IF NOT EXISTS rag_documents (
    doc_id        TEXT PRIMARY KEY NOT NULL,
    source_id     INTEGER NOT NULL REFERENCES rag_sources (source_id) ON DELETE CASCADE,
    source_name   TEXT NOT NULL,
    pk_json       TEXT NOT NULL DEFAULT '{}',
    title         TEXT NOT NULL DEFAULT '',
    body          TEXT NOT NULL DEFAULT '',
    metadata_json TEXT NOT NULL DEFAULT '{}',
    updated_at    TEXT,                       -- the source row's own timestamp, when it has one
    indexed_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
    doc_score     REAL,                       -- metadata Score   (filter min_score)
    post_type_id  INTEGER,                    -- metadata PostTypeId (filter post_type_ids)
    created_at    TEXT                        -- metadata CreationDate as YYYY-MM-DDTHH:MM:SSZ (created_after/before)
);
CREATE INDEX IF NOT EXISTS rag_documents_source ON rag_documents (source_id);

-- Tags of a document, one row each (filters tags_any / tags_all).
CREATE TABLE IF NOT EXISTS rag_doc_tags (
    tag    TEXT NOT NULL,
    doc_id TEXT NOT NULL REFERENCES rag_documents (doc_id) ON DELETE CASCADE,
    PRIMARY KEY (tag, doc_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS rag_doc_tags_doc ON rag_doc_tags (doc_id);

-- Retrieval units. chunk_rowid is the key FTS5 and the vector index use; chunk_id is the public id.
CREATE TABLE IF NOT EXISTS rag_chunks (
    chunk_rowid   INTEGER PRIMARY KEY,
    chunk_id      TEXT NOT NULL UNIQUE,       -- doc_id#chunk_index
    doc_id        TEXT NOT NULL REFERENCES rag_documents (doc_id) ON DELETE CASCADE,
    source_id     INTEGER NOT NULL,
    chunk_index   INTEGER NOT NULL,
    title         TEXT NOT NULL DEFAULT '',
    body          TEXT NOT NULL DEFAULT '',
    metadata_json TEXT NOT NULL DEFAULT '{}',
    content_hash  TEXT NOT NULL DEFAULT '',   -- of title+body: unchanged text keeps its vector
    updated_at    TEXT,
    doc_score     REAL,                       -- copies of the document's hot filter columns
    post_type_id  INTEGER,
    created_at    TEXT,
    UNIQUE (doc_id, chunk_index)
);
CREATE INDEX IF NOT EXISTS rag_chunks_source ON rag_chunks (source_id);
CREATE INDEX IF NOT EXISTS rag_chunks_created ON rag_chunks (created_at);
CREATE INDEX IF NOT EXISTS rag_chunks_score ON rag_chunks (doc_score);
CREATE INDEX IF NOT EXISTS rag_chunks_post_type ON rag_chunks (post_type_id);

-- Keyword index. Porter stemming over unicode61 (diacritics folded): measured better than plain
-- unicode61 on Cranfield (bench/retrieval_eval.py). External content: the text is stored once.
CREATE VIRTUAL TABLE IF NOT EXISTS rag_fts_chunks USING fts5 (
    chunk_id UNINDEXED,
    title,
    body,
    content = 'rag_chunks',
    content_rowid = 'chunk_rowid',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS rag_chunks_fts_insert AFTER INSERT ON rag_chunks BEGIN
    INSERT INTO rag_fts_chunks (rowid, chunk_id, title, body) VALUES (new.chunk_rowid, new.chunk_id, new.title, new.body);
END;
CREATE TRIGGER IF NOT EXISTS rag_chunks_fts_delete AFTER DELETE ON rag_chunks BEGIN
    INSERT INTO rag_fts_chunks (rag_fts_chunks, rowid, chunk_id, title, body) VALUES ('delete', old.chunk_rowid, old.chunk_id, old.title, old.body);
END;
-- chunk_id is UNINDEXED (read from rag_chunks), so only a change of the text re-indexes.
CREATE TRIGGER IF NOT EXISTS rag_chunks_fts_update AFTER UPDATE OF title, body ON rag_chunks BEGIN
    INSERT INTO rag_fts_chunks (rag_fts_chunks, rowid, chunk_id, title, body) VALUES ('delete', old.chunk_rowid, old.chunk_id, old.title, old.body);
    INSERT INTO rag_fts_chunks (rowid, chunk_id, title, body) VALUES (new.chunk_rowid, new.chunk_id, new.title, new.body);
END;

-- What a SQL-native reader wants in one place: the chunk, its document and its source.
CREATE VIEW IF NOT EXISTS rag_chunk_view AS
SELECT c.chunk_rowid, c.chunk_id, c.doc_id, c.source_id, s.name AS source_name, c.chunk_index,
       c.title, c.body, c.metadata_json AS chunk_metadata_json, d.metadata_json AS doc_metadata_json,
       d.pk_json, c.updated_at, c.doc_score, c.post_type_id, c.created_at
FROM rag_chunks c
JOIN rag_documents d ON d.doc_id = c.doc_id
JOIN rag_sources s ON s.source_id = c.source_id;

-- Per-source sync progress: the watermark cursor and the outcome of the last run.
CREATE TABLE IF NOT EXISTS rag_sync_state (
    source_id      INTEGER PRIMARY KEY REFERENCES rag_sources (source_id) ON DELETE CASCADE,
    mode           TEXT NOT NULL DEFAULT 'poll',
    cursor_json    TEXT NOT NULL DEFAULT '{}',
    last_ok_at     TEXT,
    last_error     TEXT,
    last_run_at    TEXT,
    docs_seen      INTEGER NOT NULL DEFAULT 0,  -- counts of the last run
    docs_written   INTEGER NOT NULL DEFAULT 0,
    docs_deleted   INTEGER NOT NULL DEFAULT 0,
    chunks_written INTEGER NOT NULL DEFAULT 0,
    chunks_embedded INTEGER NOT NULL DEFAULT 0,
    chunks_reused  INTEGER NOT NULL DEFAULT 0,  -- text unchanged: vector kept, not re-embedded
    rows_skipped   INTEGER NOT NULL DEFAULT 0,  -- bad rows (empty body, not UTF-8, oversize)
    last_key_scan_at TEXT                        -- last deletion scan (see key_scan_interval_s)
);

-- Sync jobs (backends/retrieval/ingest/jobs.py): progress readable by every worker and the CLI.
-- A job whose process died shows state 'running' with a dead pid; readers report it 'interrupted'.
CREATE TABLE IF NOT EXISTS rag_sync_jobs (
    job_id        TEXT PRIMARY KEY NOT NULL,
    source_names  TEXT NOT NULL DEFAULT '[]',   -- JSON list
    state         TEXT NOT NULL,                -- queued|running|ok|failed
    pid           INTEGER NOT NULL DEFAULT 0,
    member_id     TEXT NOT NULL DEFAULT '',     -- the instance running it (added to older rag.db on open)
    created_at    REAL NOT NULL,
    started_at    REAL,
    finished_at   REAL,
    progress_json TEXT NOT NULL DEFAULT '{}',   -- per source: rows read/total, docs, chunks, embeddings
    error_json    TEXT NOT NULL DEFAULT 'null'  -- {code, message} when the job failed
);
CREATE INDEX IF NOT EXISTS rag_sync_jobs_created ON rag_sync_jobs (created_at);

-- @section evidence
-- What the gateway saw, for /mcp/ai's anomaly detection and recommendations (gateway/evidence.py).
-- No row data and no secrets: refused statements are kept as normalised digest text (literals as ?).
CREATE TABLE IF NOT EXISTS evidence_traffic (
    bucket   INTEGER NOT NULL,          -- unix seconds, a multiple of 10
    endpoint TEXT NOT NULL,
    tool     TEXT NOT NULL,
    outcome  TEXT NOT NULL,             -- ok, or the error code (INVALID_ARGUMENT, UNAVAILABLE, ...)
    calls    INTEGER NOT NULL DEFAULT 0,
    truncated INTEGER NOT NULL DEFAULT 0, -- answers a cap cut
    PRIMARY KEY (bucket, endpoint, tool, outcome)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS evidence_digests (
    bucket INTEGER NOT NULL,
    digest TEXT NOT NULL,
    calls  INTEGER NOT NULL DEFAULT 0,
    sum_us INTEGER NOT NULL DEFAULT 0,
    max_us INTEGER NOT NULL DEFAULT 0,
    result_changes INTEGER NOT NULL DEFAULT 0, -- calls whose result differed from the previous one's
    PRIMARY KEY (bucket, digest)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS evidence_events (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    ts       REAL NOT NULL,
    kind     TEXT NOT NULL,             -- auth_failure | sql_refused
    endpoint TEXT NOT NULL DEFAULT '',
    tool     TEXT NOT NULL DEFAULT '',
    client   TEXT NOT NULL DEFAULT '',
    token_fp TEXT NOT NULL DEFAULT '',
    digest   TEXT NOT NULL DEFAULT '',
    text     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS evidence_events_ts ON evidence_events(ts);
CREATE TABLE IF NOT EXISTS evidence_digest_samples (  -- internal: never returned to a caller
    digest      TEXT PRIMARY KEY,
    target_id   TEXT NOT NULL,
    schema_name TEXT NOT NULL DEFAULT '',
    sql_text    TEXT NOT NULL,
    updated_at  REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS ai_anomalies (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    detected_at REAL NOT NULL,
    kind        TEXT NOT NULL,
    severity    TEXT NOT NULL,
    subject     TEXT NOT NULL,          -- JSON
    summary     TEXT NOT NULL,
    evidence    TEXT NOT NULL,          -- JSON
    window_start REAL NOT NULL,
    window_end  REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS ai_anomalies_detected ON ai_anomalies(detected_at);
-- @section variable_overrides
-- config.db only (gateway/store.py): the values the serving process took from its environment
-- (MCP_GATEWAY_<NAME>) or command line (--port, --host) at its last start, replaced at each start.
-- The runtime shows each variable's origin from it: default, disk, environment, command line, memory.
CREATE TABLE IF NOT EXISTS variable_overrides (
    variable_name  TEXT PRIMARY KEY NOT NULL,
    variable_value TEXT NOT NULL,
    origin         TEXT NOT NULL             -- environment | command line
);

-- @section admin_state
-- config.db only (not the disk layer): state the gateway keeps about its own administration.

-- The audit trail (gateway/audit.py): every admin change and its outcome, secrets masked.
-- Bounded by admin-audit_retention_days and admin-audit_max_rows (pruned on insert).
CREATE TABLE IF NOT EXISTS mcp_audit_log (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    at                REAL NOT NULL,               -- unix time
    endpoint          TEXT NOT NULL,               -- admin, config, or cli (admin.sql on a stopped gateway)
    token_fingerprint TEXT NOT NULL DEFAULT '',    -- the caller's token, as gateway/tokens.py prints it
    client            TEXT NOT NULL DEFAULT '',    -- the caller's address
    action            TEXT NOT NULL,               -- the tool, or admin.sql
    arguments         TEXT NOT NULL DEFAULT '{}',  -- JSON
    before            TEXT,                        -- JSON: the value(s) the change replaced
    after             TEXT,                        -- JSON: the value(s) it left
    outcome           TEXT NOT NULL,               -- ok, or the error code
    message           TEXT NOT NULL DEFAULT '',
    subject           TEXT NOT NULL DEFAULT ''     -- who an OAuth access token named ('' for a static token)
);
CREATE INDEX IF NOT EXISTS mcp_audit_log_at ON mcp_audit_log (at);

-- Bearer token metadata (gateway/tokens.py); the tokens themselves stay in mcp-*_endpoint_auth.
CREATE TABLE IF NOT EXISTS mcp_tokens (
    endpoint     TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,        -- first 12 hex digits of the token's SHA-256
    created_at   REAL,                 -- NULL: configured by hand (bootstrap file, SET)
    created_by   TEXT NOT NULL DEFAULT '',  -- fingerprint of the admin token that rotated it in
    last_used_at REAL,                 -- written with the periodic flush, not per request
    PRIMARY KEY (endpoint, fingerprint)
);

-- The runtime version each worker serves (gateway/workers.py): a LOAD answers once all do.
CREATE TABLE IF NOT EXISTS runtime_workers (
    pid          INTEGER PRIMARY KEY NOT NULL,
    version      INTEGER NOT NULL,
    applied_at   REAL NOT NULL,
    flushed_upto INTEGER NOT NULL DEFAULT 0  -- the last cache_flush_requests id it carried out
);

-- admin_flush_cache requests: every worker carries each out on its next poll (caches are per process).
CREATE TABLE IF NOT EXISTS cache_flush_requests (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    cache_types  TEXT NOT NULL,                -- comma separated
    target_id    TEXT,                         -- query_results: one target's entries; NULL: all
    requested_at REAL NOT NULL,
    dropped_json TEXT NOT NULL DEFAULT '{}'    -- cache type -> entries dropped, summed over the workers
);

-- @section result_cache
-- The embedded query result cache (backends/result_cache/embedded.py): result_cache.db in the
-- data directory, shared by the workers of one server and emptied when it starts.
CREATE TABLE IF NOT EXISTS cache_entries (
    key         TEXT PRIMARY KEY NOT NULL,  -- hash of target, profile, schema, statement, caps
    target_id   TEXT NOT NULL,
    schema_name TEXT NOT NULL,
    digest      TEXT NOT NULL,
    digest_text TEXT NOT NULL,
    tables      TEXT NOT NULL,     -- ",a,s.a," lower case: a table matches with instr()
    payload     BLOB NOT NULL,     -- the result as JSON (columns, rows, truncation)
    size        INTEGER NOT NULL,  -- bytes of payload: what cache-max_bytes counts
    created_us  INTEGER NOT NULL,
    expires_us  INTEGER NOT NULL,
    used_us     INTEGER NOT NULL,  -- last hit (LRU order)
    hits        INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS cache_entries_lru ON cache_entries (used_us);
CREATE INDEX IF NOT EXISTS cache_entries_expiry ON cache_entries (expires_us);
-- Entry and byte totals kept by triggers, so enforcing the limits never scans the table.
CREATE TABLE IF NOT EXISTS cache_totals (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    entries INTEGER NOT NULL,
    bytes   INTEGER NOT NULL
);
INSERT OR IGNORE INTO cache_totals VALUES (1, 0, 0);
CREATE TRIGGER IF NOT EXISTS cache_entries_added AFTER INSERT ON cache_entries BEGIN
    UPDATE cache_totals SET entries = entries + 1, bytes = bytes + NEW.size WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS cache_entries_removed AFTER DELETE ON cache_entries BEGIN
    UPDATE cache_totals SET entries = entries - 1, bytes = bytes - OLD.size WHERE id = 1;
END;
-- Per target: hits, misses, and entries gone by reason (max_entries, max_bytes, expired, ...).
CREATE TABLE IF NOT EXISTS cache_counters (
    target_id TEXT NOT NULL,
    counter   TEXT NOT NULL,
    value     INTEGER NOT NULL,
    PRIMARY KEY (target_id, counter)
);

-- @section catalog
-- The discovery catalog and the agents' memory (catalog.db in the data directory;
-- handlers/query/catalog/store.py applies this section). A discovery run (discovery.run_static)
-- harvests one target's structure into catalog_objects under a new run_id; agents add notes,
-- summaries, relationships, domains, metrics and question templates per target and run. A new
-- run never deletes an old run's memory: llm.search and catalog.get reach it by target.

-- One discovery run: a background job whose progress every worker and the CLI can read.
-- A run whose process died shows state 'running' with a dead pid; readers report it 'interrupted'.
CREATE TABLE IF NOT EXISTS catalog_runs (
    run_id        INTEGER PRIMARY KEY AUTOINCREMENT,
    target_id     TEXT NOT NULL,
    protocol      TEXT NOT NULL DEFAULT '',
    schema_filter TEXT NOT NULL DEFAULT '',
    notes         TEXT NOT NULL DEFAULT '',
    state         TEXT NOT NULL DEFAULT 'queued',  -- queued|running|ok|failed
    pid           INTEGER NOT NULL DEFAULT 0,
    created_at    REAL NOT NULL,
    started_at    REAL,
    finished_at   REAL,
    progress_json TEXT NOT NULL DEFAULT '{}',      -- phase, schemas and tables done/total
    counts_json   TEXT NOT NULL DEFAULT '{}',      -- schemas, tables, views, columns, foreign_keys, ...
    error_json    TEXT NOT NULL DEFAULT 'null'
);
CREATE INDEX IF NOT EXISTS catalog_runs_target ON catalog_runs (target_id, run_id);

-- Schemas, tables, views and columns. run_id 0 holds objects written by catalog.upsert outside
-- any run. definition_json: a table's harvested structure (keys, indexes, foreign keys), a
-- column's type, nullability and default.
CREATE TABLE IF NOT EXISTS catalog_objects (
    object_id       INTEGER PRIMARY KEY,
    target_id       TEXT NOT NULL,
    run_id          INTEGER NOT NULL DEFAULT 0,
    object_type     TEXT NOT NULL,               -- schema|table|view|materialized_view|foreign_table|virtual_table|column
    schema_name     TEXT NOT NULL DEFAULT '',
    table_name      TEXT NOT NULL DEFAULT '',
    column_name     TEXT NOT NULL DEFAULT '',
    comment         TEXT NOT NULL DEFAULT '',
    notes           TEXT NOT NULL DEFAULT '',
    tags            TEXT NOT NULL DEFAULT '',    -- space separated
    rows_estimate   INTEGER,
    definition_json TEXT NOT NULL DEFAULT '{}',
    source          TEXT NOT NULL DEFAULT 'harvest',  -- harvest | upsert
    updated_at      REAL NOT NULL,
    UNIQUE (target_id, run_id, object_type, schema_name, table_name, column_name)
);
CREATE INDEX IF NOT EXISTS catalog_objects_table ON catalog_objects (target_id, schema_name, table_name);

-- Names (each identifier whole, customer_id, and in its words, customer id), comments, notes and tags, bm25-ranked.
CREATE VIRTUAL TABLE IF NOT EXISTS catalog_fts USING fts5 (
    name, comment, notes, tags,
    content = '',
    contentless_delete = 1,
    tokenize = 'porter unicode61 remove_diacritics 2 tokenchars ''_'''
);
CREATE TRIGGER IF NOT EXISTS catalog_objects_fts_insert AFTER INSERT ON catalog_objects BEGIN
    INSERT INTO catalog_fts (rowid, name, comment, notes, tags)
    VALUES (new.object_id, trim(new.schema_name || ' ' || new.table_name || ' ' || new.column_name || ' ' || replace(new.table_name || ' ' || new.column_name, '_', ' ')), new.comment, new.notes, new.tags);
END;
CREATE TRIGGER IF NOT EXISTS catalog_objects_fts_delete AFTER DELETE ON catalog_objects BEGIN
    DELETE FROM catalog_fts WHERE rowid = old.object_id;
END;
CREATE TRIGGER IF NOT EXISTS catalog_objects_fts_update AFTER UPDATE OF comment, notes, tags ON catalog_objects BEGIN
    DELETE FROM catalog_fts WHERE rowid = old.object_id;
    INSERT INTO catalog_fts (rowid, name, comment, notes, tags)
    VALUES (new.object_id, trim(new.schema_name || ' ' || new.table_name || ' ' || new.column_name || ' ' || replace(new.table_name || ' ' || new.column_name, '_', ' ')), new.comment, new.notes, new.tags);
END;

-- Declared foreign keys and view dependencies (harvested, per run) and relationships agents
-- recorded (kind 'agent', from llm.relationship_upsert). Columns are JSON lists.
CREATE TABLE IF NOT EXISTS catalog_relationships (
    relationship_id INTEGER PRIMARY KEY,
    target_id     TEXT NOT NULL,
    run_id        INTEGER NOT NULL DEFAULT 0,
    agent_run_id  INTEGER,
    kind          TEXT NOT NULL,                 -- declared_fk | view_dependency | agent
    from_schema   TEXT NOT NULL,
    from_table    TEXT NOT NULL,
    from_columns  TEXT NOT NULL DEFAULT '[]',
    to_schema     TEXT NOT NULL,
    to_table      TEXT NOT NULL,
    to_columns    TEXT NOT NULL DEFAULT '[]',
    confidence    REAL NOT NULL DEFAULT 1.0,
    evidence_json TEXT NOT NULL DEFAULT '{}',
    name          TEXT NOT NULL DEFAULT '',
    updated_at    REAL NOT NULL,
    UNIQUE (target_id, run_id, kind, from_schema, from_table, from_columns, to_schema, to_table, to_columns)
);
CREATE INDEX IF NOT EXISTS catalog_relationships_from ON catalog_relationships (target_id, from_schema, from_table);
CREATE INDEX IF NOT EXISTS catalog_relationships_to ON catalog_relationships (target_id, to_schema, to_table);

-- Agent memory (agent.* and llm.* tools): a run of an agent's own discovery, its events, and
-- what it concluded. Unknown ids are refused by the tools, not by constraints.
CREATE TABLE IF NOT EXISTS agent_runs (
    agent_run_id INTEGER PRIMARY KEY AUTOINCREMENT,
    target_id    TEXT NOT NULL,
    run_id       INTEGER NOT NULL,
    model        TEXT NOT NULL DEFAULT '',
    notes        TEXT NOT NULL DEFAULT '',
    status       TEXT NOT NULL DEFAULT 'running',  -- running|ok|failed|cancelled
    error        TEXT NOT NULL DEFAULT '',
    started_at   REAL NOT NULL,
    finished_at  REAL
);
CREATE TABLE IF NOT EXISTS agent_events (
    event_id     INTEGER PRIMARY KEY,
    agent_run_id INTEGER NOT NULL REFERENCES agent_runs (agent_run_id) ON DELETE CASCADE,
    event_type   TEXT NOT NULL,
    payload_json TEXT NOT NULL DEFAULT '{}',
    created_at   REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS agent_events_run ON agent_events (agent_run_id, event_id);
CREATE TABLE IF NOT EXISTS llm_summaries (
    summary_id   INTEGER PRIMARY KEY,
    target_id    TEXT NOT NULL,
    run_id       INTEGER NOT NULL,
    agent_run_id INTEGER NOT NULL,
    object_id    INTEGER NOT NULL,
    object_name  TEXT NOT NULL,                  -- schema.table[.column] of the object, stable across runs
    summary      TEXT NOT NULL,
    confidence   REAL,
    status       TEXT NOT NULL DEFAULT 'draft',  -- draft|reviewed|final
    sources_json TEXT NOT NULL DEFAULT '[]',
    updated_at   REAL NOT NULL,
    UNIQUE (target_id, run_id, object_id)
);
CREATE TABLE IF NOT EXISTS llm_domains (
    domain_id    INTEGER PRIMARY KEY,
    target_id    TEXT NOT NULL,
    run_id       INTEGER NOT NULL,
    agent_run_id INTEGER NOT NULL,
    name         TEXT NOT NULL,
    description  TEXT NOT NULL DEFAULT '',
    confidence   REAL,
    updated_at   REAL NOT NULL,
    UNIQUE (target_id, name)
);
CREATE TABLE IF NOT EXISTS llm_domain_members (
    domain_id   INTEGER NOT NULL REFERENCES llm_domains (domain_id) ON DELETE CASCADE,
    schema_name TEXT NOT NULL,
    table_name  TEXT NOT NULL,
    role        TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (domain_id, schema_name, table_name)
);
CREATE TABLE IF NOT EXISTS llm_metrics (
    metric_id    INTEGER PRIMARY KEY,
    target_id    TEXT NOT NULL,
    run_id       INTEGER NOT NULL,
    agent_run_id INTEGER NOT NULL,
    name         TEXT NOT NULL,
    description  TEXT NOT NULL DEFAULT '',
    sql          TEXT NOT NULL,                  -- passed the read-only check when stored
    unit         TEXT NOT NULL DEFAULT '',
    updated_at   REAL NOT NULL,
    UNIQUE (target_id, name)
);
CREATE TABLE IF NOT EXISTS llm_question_templates (
    template_id     INTEGER PRIMARY KEY,
    target_id       TEXT NOT NULL,
    run_id          INTEGER NOT NULL,
    agent_run_id    INTEGER NOT NULL,
    question        TEXT NOT NULL,
    sql_template    TEXT NOT NULL,               -- {name} placeholders; checked read-only when stored
    parameters_json TEXT NOT NULL DEFAULT '[]',
    created_at      REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS llm_notes (
    note_id      INTEGER PRIMARY KEY,
    target_id    TEXT NOT NULL,
    run_id       INTEGER NOT NULL,
    agent_run_id INTEGER,
    object_id    INTEGER,
    title        TEXT NOT NULL DEFAULT '',
    body         TEXT NOT NULL,
    tags         TEXT NOT NULL DEFAULT '',
    created_at   REAL NOT NULL
);
-- Everything above that an agent wrote, searchable by llm.search; kept in step by the store.
CREATE VIRTUAL TABLE IF NOT EXISTS llm_fts USING fts5 (
    kind UNINDEXED, ref_id UNINDEXED, target_id UNINDEXED, title, body,
    tokenize = 'porter unicode61 remove_diacritics 2'
);

-- @section cluster_postgres
-- Configuration shared by a cluster of gateways (gateway/cluster.py), in the PostgreSQL named
-- by mcp-cluster_dsn. Each instance keeps its memory and runtime layers in its own config.db;
-- these tables are the cluster's disk layer and the last runtime of every module.
-- Rows are JSON ({table: [row, ...]}) because they mirror SQLite admin tables whose columns
-- grow with the gateway version; the store copies them column by column.
CREATE TABLE IF NOT EXISTS mcp_cluster_runtime (
    module       TEXT PRIMARY KEY,
    version      BIGINT NOT NULL,             -- + 1 per LOAD ... TO RUNTIME on any instance
    memory_rows  JSONB NOT NULL,              -- the memory layer the LOAD validated
    runtime_rows JSONB NOT NULL,              -- what it built; instances serve exactly these
    loaded_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    loaded_by    TEXT NOT NULL                -- member_id of the instance that ran the LOAD
);
CREATE TABLE IF NOT EXISTS mcp_cluster_disk (
    module    TEXT PRIMARY KEY,
    disk_rows JSONB NOT NULL,
    saved_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    saved_by  TEXT NOT NULL
);
-- One row per instance, refreshed every second by each of its workers (get_status reads it).
CREATE TABLE IF NOT EXISTS mcp_cluster_members (
    member_id  TEXT PRIMARY KEY,              -- mcp-cluster_member_name, or host:port
    host       TEXT NOT NULL,
    port       INTEGER NOT NULL,
    pid        INTEGER NOT NULL,              -- of the worker that wrote last
    versions   JSONB NOT NULL DEFAULT '{}',   -- {module: version this instance serves}
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_seen  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- @section rag_postgres
-- The retrieval index on PostgreSQL + pgvector (rag-backend = postgresql; backends/retrieval/storage/postgresql/).
-- Same tables and meaning as the rag section; what SQLite does with FTS5 and the ANN files is
-- here a generated tsvector with a GIN index and a pgvector column with an HNSW index, both on
-- rag_chunks itself, so a filtered search is ONE query over one table (the filter columns sit
-- beside the vector: pgvector's iterative index scan then keeps scanning until k rows pass).
-- The vectors are float32 (exact distances for the scores, as rag.db's); the HNSW index is over
-- {hnsw_expr}: their halfvec cast (half the index, rag-postgres_hnsw_type) or the vectors themselves.
-- {dim} is the embedding width, {ops} the opclass of the indexed type.
CREATE TABLE IF NOT EXISTS rag_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rag_sources (
    source_id      BIGINT PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE,
    enabled        INTEGER NOT NULL DEFAULT 1,
    backend_type   TEXT NOT NULL DEFAULT '',
    backend_host   TEXT NOT NULL DEFAULT '',
    backend_port   INTEGER NOT NULL DEFAULT 0,
    backend_user   TEXT NOT NULL DEFAULT '',
    backend_pass   TEXT NOT NULL DEFAULT '',
    backend_db     TEXT NOT NULL DEFAULT '',
    table_name     TEXT NOT NULL DEFAULT '',
    pk_column      TEXT NOT NULL DEFAULT '',
    where_sql      TEXT NOT NULL DEFAULT '',
    target_id      TEXT NOT NULL DEFAULT '',
    doc_map_json   TEXT NOT NULL DEFAULT '{}',
    chunking_json  TEXT NOT NULL DEFAULT '{}',
    embedding_json TEXT NOT NULL DEFAULT '{}',
    created_at     TEXT NOT NULL DEFAULT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
    updated_at     TEXT NOT NULL DEFAULT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
);
CREATE TABLE IF NOT EXISTS rag_documents (
    doc_id        TEXT PRIMARY KEY,
    source_id     BIGINT NOT NULL REFERENCES rag_sources (source_id) ON DELETE CASCADE,
    source_name   TEXT NOT NULL,
    pk_json       TEXT NOT NULL DEFAULT '{}',
    title         TEXT NOT NULL DEFAULT '',
    body          TEXT NOT NULL DEFAULT '',
    metadata_json TEXT NOT NULL DEFAULT '{}',
    updated_at    TEXT,
    indexed_at    TEXT NOT NULL DEFAULT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
    doc_score     DOUBLE PRECISION,
    post_type_id  INTEGER,
    created_at    TEXT
);
CREATE INDEX IF NOT EXISTS rag_documents_source ON rag_documents (source_id);
CREATE TABLE IF NOT EXISTS rag_doc_tags (
    tag    TEXT NOT NULL,
    doc_id TEXT NOT NULL REFERENCES rag_documents (doc_id) ON DELETE CASCADE,
    PRIMARY KEY (tag, doc_id)
);
CREATE INDEX IF NOT EXISTS rag_doc_tags_doc ON rag_doc_tags (doc_id);
CREATE TABLE IF NOT EXISTS rag_chunks (
    chunk_rowid   BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    chunk_id      TEXT NOT NULL UNIQUE,
    doc_id        TEXT NOT NULL REFERENCES rag_documents (doc_id) ON DELETE CASCADE,
    source_id     BIGINT NOT NULL,
    chunk_index   INTEGER NOT NULL,
    title         TEXT NOT NULL DEFAULT '',
    body          TEXT NOT NULL DEFAULT '',
    metadata_json TEXT NOT NULL DEFAULT '{}',
    content_hash  TEXT NOT NULL DEFAULT '',
    updated_at    TEXT,
    doc_score     DOUBLE PRECISION,
    post_type_id  INTEGER,
    created_at    TEXT,
    -- English stemming (as FTS5's porter); the title weighs more (A) than the body (D).
    fts           TSVECTOR GENERATED ALWAYS AS (
                      setweight(to_tsvector('english', title), 'A') || setweight(to_tsvector('english', body), 'D')) STORED,
    embedding     vector({dim}),                  -- float32, unit length
    UNIQUE (doc_id, chunk_index)
);
CREATE INDEX IF NOT EXISTS rag_chunks_source ON rag_chunks (source_id);
CREATE INDEX IF NOT EXISTS rag_chunks_created ON rag_chunks (created_at);
CREATE INDEX IF NOT EXISTS rag_chunks_score ON rag_chunks (doc_score);
CREATE INDEX IF NOT EXISTS rag_chunks_post_type ON rag_chunks (post_type_id);
CREATE INDEX IF NOT EXISTS rag_chunks_fts ON rag_chunks USING gin (fts);
-- ef_construction 128 (pgvector's default is 64), as rag.db's ANN builds with expansion_add 128: at 1M
-- chunks a graph built with 64 topped out at recall@10 0.941 at any ef_search (bench/README, issue 16).
CREATE INDEX IF NOT EXISTS rag_chunks_embedding ON rag_chunks USING hnsw (({hnsw_expr}) {ops}) WITH (m = 16, ef_construction = 128);
CREATE TABLE IF NOT EXISTS rag_sync_state (
    source_id       BIGINT PRIMARY KEY REFERENCES rag_sources (source_id) ON DELETE CASCADE,
    mode            TEXT NOT NULL DEFAULT 'poll',
    cursor_json     TEXT NOT NULL DEFAULT '{}',
    last_ok_at      TEXT,
    last_error      TEXT,
    last_run_at     TEXT,
    docs_seen       BIGINT NOT NULL DEFAULT 0,
    docs_written    BIGINT NOT NULL DEFAULT 0,
    docs_deleted    BIGINT NOT NULL DEFAULT 0,
    chunks_written  BIGINT NOT NULL DEFAULT 0,
    chunks_embedded BIGINT NOT NULL DEFAULT 0,
    chunks_reused   BIGINT NOT NULL DEFAULT 0,
    rows_skipped    BIGINT NOT NULL DEFAULT 0,
    last_key_scan_at TEXT
);
CREATE TABLE IF NOT EXISTS rag_sync_jobs (
    job_id        TEXT PRIMARY KEY,
    source_names  TEXT NOT NULL DEFAULT '[]',
    state         TEXT NOT NULL,
    pid           INTEGER NOT NULL DEFAULT 0,
    member_id     TEXT NOT NULL DEFAULT '',     -- the instance running it (a pid alone is ambiguous in a cluster)
    created_at    DOUBLE PRECISION NOT NULL,
    started_at    DOUBLE PRECISION,
    finished_at   DOUBLE PRECISION,
    progress_json TEXT NOT NULL DEFAULT '{}',
    error_json    TEXT NOT NULL DEFAULT 'null'
);
CREATE INDEX IF NOT EXISTS rag_sync_jobs_created ON rag_sync_jobs (created_at);
