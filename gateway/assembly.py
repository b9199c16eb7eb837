"""The app assembly: the one module of gateway/ that knows the handlers.

Everything endpoint-specific the infrastructure needs comes from the explicit list of
handler classes (handlers.HANDLER_CLASSES) through here: the endpoints (and so their token
variables), the declared variables and admin tables (backends' first, then each handler's),
the CLI sub-commands, what backup and restore must know of each endpoint's files, and the
shared database components every worker builds before its handlers (`share_backends`).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import handlers  # light: its handler classes are imported on first use (handler_classes)

if TYPE_CHECKING:
    from backends.result_cache import ResultCache
    from gateway.data_files import DataFiles
    from gateway.services import Services
    from gateway.store import ConfigModule, ConfigStore
    from gateway.tools import ToolHandler
    from gateway.variables import Variable

log = logging.getLogger("mcp_gateway")
# The backends and the handlers are imported where a function needs them, not here: the command
# line imports this module for every command, and `--help` or `admin` against a running gateway
# need none of them (their drivers, sqlglot, the embedder: most of a second).


def handler_classes() -> tuple[type[ToolHandler], ...]:
    return handlers.HANDLER_CLASSES


def handler_commands() -> dict[str, str]:
    """The sub-commands the handlers add to the command line (name -> help), without importing them."""
    return dict(handlers.CLI_COMMANDS)


def endpoints() -> tuple[str, ...]:
    """The endpoint names, `/mcp/<name>`, in the handler list's order."""
    return tuple(cls.endpoint for cls in handler_classes())


def declared_variables() -> dict[str, Variable]:
    from backends.declarations import BACKEND_VARIABLES
    from gateway.resources import RESOURCE_VARIABLES
    from gateway.variables import all_variables, tools_disabled_variable

    handler_variables = (v for cls in handler_classes() for v in cls.variables)
    disabled = (tools_disabled_variable(e) for e in endpoints())
    return all_variables((*BACKEND_VARIABLES, *RESOURCE_VARIABLES, *handler_variables, *disabled), endpoints=endpoints())


def builtin_tools() -> dict[str, dict[str, bool]]:
    """Each built-in endpoint's tools (both spellings), and whether each takes a target_id (can be pinned)."""
    catalog: dict[str, dict[str, bool]] = {}
    for cls in handler_classes():
        tools = catalog.setdefault(cls.endpoint, {})
        for spec in cls.tools.values():
            takes_target = "target_id" in spec.input_schema.get("properties", {})
            tools[spec.name] = tools[spec.portable_name] = takes_target
    return catalog


def config_modules() -> list[ConfigModule]:
    from backends.custom_tools import tools_module
    from backends.declarations import BACKEND_CONFIG_MODULES
    from gateway.prompts import PROMPTS_MODULE

    return [
        *BACKEND_CONFIG_MODULES,
        tools_module(builtin_tools()),
        PROMPTS_MODULE,
        *(m for cls in handler_classes() for m in cls.config_modules),
    ]


def data_files() -> list[DataFiles]:
    """The endpoints' scratch and derived files in the data directory (gateway/backup.py)."""
    return [cls.data_files for cls in handler_classes() if cls.data_files is not None]


def open_store(data_dir: Path) -> ConfigStore:
    """The config store of a data directory, with every declared variable and admin table (and
    attached to the cluster its runtime names, if any: gateway/cluster.py)."""
    from backends.engines.postgresql import CLUSTER_DATABASE
    from gateway.store import ConfigStore

    store = ConfigStore(
        Path(data_dir), variables=declared_variables(), modules=config_modules(), cluster_database=CLUSTER_DATABASE
    )
    store.attach_cluster_from_runtime()
    return store


def prepare_backends(data_dir: Path) -> None:
    """What the serving parent process does once, before any worker starts: empty the embedded
    result cache (results from before a restart are not trusted; a Redis store is left alone,
    other instances share it)."""
    from backends.result_cache.embedded import EmbeddedStore

    EmbeddedStore.reset(data_dir)


def share_backends(services: Services) -> None:
    """Build what every endpoint reaching a database shares: the target pools, the query result
    cache and the read-only SQL path over both. Before any handler is constructed; the app
    starts the cache's upkeep when it serves, and closes them all after the last handler."""
    from backends import readonly
    from backends.custom_tools import CustomTools
    from backends.pools import TargetPools
    from backends.result_cache import ResultCache
    from backends.sql import ReadOnlySql

    services.targets = TargetPools(services.runtime)
    services.result_cache = ResultCache(services.data_dir, services.runtime, services.metrics)
    services.sql = ReadOnlySql(services.targets, services.store, cache=services.result_cache, evidence=services.evidence)
    services.custom_tools = CustomTools(services.sql).by_endpoint
    services.cache_flushers["readonly_shapes"] = lambda _target_id: readonly.clear_caches()
    services.cache_flushers["query_results"] = functools.partial(_clear_results, services.result_cache)


def _clear_results(cache: ResultCache, target_id: str | None) -> int:
    """admin_flush_cache's query_results, in each worker (the store is shared: the first drops the entries)."""
    from backends.result_cache.store import StoreUnavailable

    try:
        return cache.clear(target_id=target_id)
    except StoreUnavailable:  # Redis is down: nothing is served from it meanwhile, and the runtime follower must go on
        log.warning("admin_flush_cache: the result cache store is unavailable; its entries were not flushed")
        return 0


def close_backends(services: Services) -> None:
    if services.sql is not None:
        services.sql.close()  # pending digests and rule hits first
    if services.result_cache is not None:
        services.result_cache.close()
    if services.targets is not None:
        services.targets.close()


def open_config(data_dir: Path) -> ConfigStore:
    """`open_store`, with the admin tables created if the data directory is new."""
    store = open_store(data_dir)
    store.initialize()
    return store
