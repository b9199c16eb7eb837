"""The /mcp/query endpoint: routes calls to logical targets through shared connection pools.

The handler owns the `TargetPools` of the current runtime and offers it to the rest of the
gateway as services.shared["pools"] (RAG fetch and ingestion read through it). A LOAD MCP
PROFILES / MCP VARIABLES TO RUNTIME reaches `on_runtime_change`, which rebuilds only the
pools of targets that changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from gateway.pools import TargetPools
from gateway.runtime import Runtime
from gateway.store import ConfigModule
from gateway.targets import PROFILES_MODULE, QUERY_VARIABLES
from gateway.variables import Variable
from handlers.base import ToolHandler
from handlers.query.discovery import DiscoveryTools
from handlers.query.sql_tools import SqlTools

if TYPE_CHECKING:
    from gateway.services import Services


class QueryHandler(SqlTools, DiscoveryTools, ToolHandler):
    endpoint = "query"
    title = "Database query"
    instructions = (
        "Read-only access to configured databases. Start with list_targets, then list_schemas, "
        "list_tables, describe_table and get_constraints to learn the schema; then sample_rows, "
        "sample_distinct, explain_sql and run_sql_readonly (one read-only statement, capped rows)."
    )
    # The mixins' declarations join ours, so SqlTools can add variables or modules on its own.
    variables: ClassVar[tuple[Variable, ...]] = (*QUERY_VARIABLES, *SqlTools.variables)
    config_modules: ClassVar[tuple[ConfigModule, ...]] = (PROFILES_MODULE, *SqlTools.config_modules)

    def __init__(self, services: Services) -> None:
        super().__init__(services)
        self.pools = TargetPools(services.runtime)
        services.shared["pools"] = self.pools

    def on_runtime_change(self, old: Runtime | None, new: Runtime) -> None:
        self.pools.update(new)

    async def close(self) -> None:
        await super().close()  # SqlTools writes pending digests and rule hits
        self.pools.close()
