"""The /mcp/query endpoint: read-only SQL and schema discovery on logical targets.

The targets' pools (services.targets, backends.pools) and the read-only SQL path
(services.sql, backends.sql) are built by the app before this handler and shared with the
other endpoints; the handler only declares the tools over them.
"""

from __future__ import annotations

from handlers.query.discovery import DiscoveryTools
from handlers.query.sql_tools import SqlTools


class QueryHandler(SqlTools, DiscoveryTools):
    endpoint = "query"
    title = "Database query"
    instructions = (
        "Read-only access to configured databases. Start with list_targets, then list_schemas, "
        "list_tables, describe_table and get_constraints to learn the schema; then sample_rows, "
        "sample_distinct, explain_sql and run_sql_readonly (one read-only statement, capped rows)."
    )
