"""Helpers shared by the query endpoint tests: a real ConfigStore in a temp directory, profile
rows, a QueryHandler built on it, and tool calls through the handler's real execute path."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from backends.declarations import BACKEND_CONFIG_MODULES, BACKEND_VARIABLES
from gateway.assembly import share_backends
from gateway.rendering import compact_text
from gateway.services import Services
from gateway.store import ConfigStore
from gateway.tools import ToolHandler
from gateway.variables import all_variables


def make_store(data_dir: Path) -> ConfigStore:
    store = ConfigStore(data_dir, variables=all_variables(BACKEND_VARIABLES), modules=list(BACKEND_CONFIG_MODULES))
    store.initialize()
    store.load_to_runtime("MCP VARIABLES")
    return store


def insert(store: ConfigStore, table: str, **row: Any) -> None:
    cols = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    store.conn().execute(f"INSERT OR REPLACE INTO main.{table} ({cols}) VALUES ({marks})", tuple(row.values()))


def add_auth(store: ConfigStore, auth_profile_id: str, username: str, password: str = "", **extra: Any) -> None:
    insert(store, "mcp_auth_profiles", auth_profile_id=auth_profile_id, db_username=username, db_password=password, **extra)


def add_target(store: ConfigStore, target_id: str, protocol: str, **extra: Any) -> None:
    insert(store, "mcp_target_profiles", target_id=target_id, protocol=protocol, **extra)


def make_services(store: ConfigStore) -> Services:
    """Services as a worker builds them: the target pools and the read-only SQL path included."""
    services = Services(data_dir=store.data_dir, store=store, runtime=store.read_runtime(), stats=None, metrics=None)  # type: ignore[arg-type]
    share_backends(services)
    return services


def reload(store: ConfigStore, handler: ToolHandler) -> None:
    """What a worker does after LOAD ... TO RUNTIME: new snapshot, then on_runtime_change."""
    old = handler.services.runtime
    handler.services.runtime = store.read_runtime()
    if handler.services.targets is not None:
        handler.services.targets.update(handler.services.runtime)
    handler.on_runtime_change(old, handler.services.runtime)


def call(handler: ToolHandler, name: str, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    """Run one tool as the server does; returns (is_error, structuredContent), JSON-checked."""
    spec = handler.find_tool(name)
    assert spec is not None, name
    ctx = handler.context(spec, handler.services.runtime)
    result = asyncio.run(handler.execute_tool(spec, arguments, ctx))
    text = result["content"][0]["text"]
    if result["isError"]:
        assert json.loads(text) == result["structuredContent"]  # an error's text block is its JSON
    else:
        assert text == compact_text(result["structuredContent"])  # the model's rendering of the same answer
    return result["isError"], result["structuredContent"]


def ok(handler: ToolHandler, name: str, **arguments: Any) -> dict[str, Any]:
    is_error, payload = call(handler, name, **arguments)
    assert not is_error, payload
    return payload


def error(handler: ToolHandler, name: str, **arguments: Any) -> dict[str, Any]:
    is_error, payload = call(handler, name, **arguments)
    assert is_error, payload
    return payload["error"]


def count_rows(settings: dict[str, Any], engine: str, table: str) -> int:
    """Rows of `table` read by the driver directly (engine "maria" or "pg"), outside the gateway."""
    import psycopg
    import pymysql

    if engine == "maria":
        conn = pymysql.connect(**settings)
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT count(*) FROM {table}")
                return cur.fetchone()[0]
        finally:
            conn.close()
    with psycopg.connect(**settings) as pg:
        return pg.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
