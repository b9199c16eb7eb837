"""What backends/ adds to the runtime configuration: its variables (targets, the SQL path, the
result cache) and its admin tables
(MCP PROFILES, MCP QUERY RULES). gateway.assembly registers them before the handlers' own."""

from __future__ import annotations

from backends.profiles import PROFILES_MODULE
from backends.result_cache import CACHE_VARIABLES
from backends.rules import QUERY_RULES_MODULE
from backends.sql import SQL_VARIABLES
from backends.targets import QUERY_VARIABLES
from gateway.store import ConfigModule
from gateway.variables import Variable

BACKEND_VARIABLES: tuple[Variable, ...] = (*QUERY_VARIABLES, *SQL_VARIABLES, *CACHE_VARIABLES)
BACKEND_CONFIG_MODULES: tuple[ConfigModule, ...] = (PROFILES_MODULE, QUERY_RULES_MODULE)
