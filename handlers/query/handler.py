"""The /mcp/query endpoint: read-only SQL, schema discovery, profiling, join suggestions, the
discovery catalog and agents' memory on logical targets.

The targets' pools (services.targets, backends.pools) and the read-only SQL path
(services.sql, backends.sql) are built by the app before this handler and shared with the
other endpoints; the handler hands them, and the discovery catalog it owns
(<data_dir>/catalog.db, opened on first use, closed with the handler), to its tool groups.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from gateway.prompts import Prompt
from gateway.resource_tools import ResourceTools
from gateway.runtime import Runtime
from gateway.store import ConfigStore
from gateway.tools import ToolHandler
from gateway.variables import Variable
from handlers.query.agent_memory import AgentMemoryTools
from handlers.query.catalog.access import DiscoveryCatalog
from handlers.query.catalog.tools import CatalogTools
from handlers.query.discovery import CatalogReaders, DiscoveryTools
from handlers.query.joins import JoinTools
from handlers.query.overview import OverviewTools
from handlers.query.profile import ProfileTools
from handlers.query.resources import QueryResources, query_prompts
from handlers.query.sql_tools import SqlTools
from handlers.query.variables import QUERY_VARIABLES

if TYPE_CHECKING:
    from gateway.services import Services


class QueryHandler(ToolHandler):
    endpoint = "query"
    title = "Database query"
    instructions = (
        "Read-only access to configured databases. Start with list_targets and get_schema_info (a whole schema in one "
        "call, or a summary with suggested next calls when it is large), or list_schemas, "
        "list_tables, describe_table and get_constraints to learn the schema; table_profile and "
        "column_profile show what the data looks like, suggest_joins how tables join (declared keys "
        "first, then inferred ones with evidence and a ready ON clause); then sample_rows, "
        "sample_distinct, explain_sql and run_sql_readonly (one read-only statement, capped rows). "
        "discovery.run_static harvests a target into a searchable catalog (catalog.search); agents "
        "keep what they learn with the agent.* and llm.* tools and find it again with llm.search."
    )
    variables: ClassVar[tuple[Variable, ...]] = QUERY_VARIABLES
    # The order of tools/list (the agent memory first, as clients have always seen it).
    tool_groups: ClassVar[tuple[type, ...]] = (
        AgentMemoryTools, CatalogTools, JoinTools, ProfileTools, DiscoveryTools, OverviewTools, SqlTools, ResourceTools,
    )  # fmt: skip

    def __init__(self, services: Services) -> None:
        super().__init__(services)
        if services.targets is None or services.sql is None:  # gateway.assembly.share_backends comes first
            raise TypeError("QueryHandler needs the shared target pools and read-only SQL path (services.targets, services.sql)")
        self.pools = services.targets
        self.sql = services.sql
        self.catalog = DiscoveryCatalog(services.data_dir / "catalog.db", self.pools.connection)
        self._resources = QueryResources(self.pools, self.sql, self.in_thread)

    def make_groups(self) -> list[object]:
        readers = CatalogReaders(self.pools)
        return [
            AgentMemoryTools(self.catalog, self.pools),
            CatalogTools(self.catalog, self.pools),
            JoinTools(readers, self.sql, self.catalog),
            ProfileTools(readers, self.sql),
            DiscoveryTools(self.pools, readers),
            OverviewTools(readers, self.sql),
            SqlTools(self.sql, self.in_thread),
            ResourceTools(self._resources),
        ]

    def resources(self) -> QueryResources:
        return self._resources

    def prompts(self, runtime: Runtime) -> list[Prompt]:
        return query_prompts(self.catalog)

    async def close(self) -> None:
        self.catalog.close()
        await super().close()

    @classmethod
    def add_cli(cls, commands: argparse._SubParsersAction, *, open_store: Callable[[str | None], ConfigStore]) -> None:
        from handlers.query.catalog.commands import add_query_commands

        add_query_commands(commands, open_store=open_store)
