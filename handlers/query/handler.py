"""The /mcp/query endpoint: read-only SQL, schema discovery, profiling, join suggestions, the
discovery catalog and agents' memory on logical targets.

The targets' pools (services.targets, backends.pools) and the read-only SQL path
(services.sql, backends.sql) are built by the app before this handler and shared with the
other endpoints; the handler only declares the tools over them. The catalog store
(<data_dir>/catalog.db) is opened on first use and closed with the handler.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import ClassVar

from gateway.store import ConfigStore
from gateway.variables import Variable
from handlers.query.agent_memory import AgentMemoryTools
from handlers.query.catalog.tools import CatalogTools
from handlers.query.discovery import DiscoveryTools
from handlers.query.joins import JoinTools
from handlers.query.profile import ProfileTools
from handlers.query.sql_tools import SqlTools
from handlers.query.variables import QUERY_VARIABLES


class QueryHandler(SqlTools, DiscoveryTools, ProfileTools, JoinTools, CatalogTools, AgentMemoryTools):
    endpoint = "query"
    title = "Database query"
    instructions = (
        "Read-only access to configured databases. Start with list_targets, then list_schemas, "
        "list_tables, describe_table and get_constraints to learn the schema; table_profile and "
        "column_profile show what the data looks like, suggest_joins how tables join (declared keys "
        "first, then inferred ones with evidence and a ready ON clause); then sample_rows, "
        "sample_distinct, explain_sql and run_sql_readonly (one read-only statement, capped rows). "
        "discovery.run_static harvests a target into a searchable catalog (catalog.search); agents "
        "keep what they learn with the agent.* and llm.* tools and find it again with llm.search."
    )
    variables: ClassVar[tuple[Variable, ...]] = QUERY_VARIABLES

    async def close(self) -> None:
        self.close_catalog()
        await super().close()

    @classmethod
    def add_cli(cls, commands: argparse._SubParsersAction, *, open_store: Callable[[str | None], ConfigStore]) -> None:
        from handlers.query.catalog.commands import add_query_commands

        add_query_commands(commands, open_store=open_store)
