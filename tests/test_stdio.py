"""`mcp-gateway stdio <endpoint>` (issue 29): the official SDK's stdio client launches it as a
command and lists and calls tools on /mcp/rag and /mcp/query, through a running gateway (found by
its run file, the token read from its data directory or given in $MCP_GATEWAY_TOKEN) and, with
no gateway running, through one the command starts for itself and stops when the client leaves."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from server_process import REPO_ROOT, call_tool, start_gateway


def _params(data_dir: Path | None, endpoint: str, tmp_path: Path, **env: str) -> StdioServerParameters:
    environ = {k: v for k, v in os.environ.items() if k != "MCP_GATEWAY_TOKEN"}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), environ.get("PYTHONPATH", "")]))
    environ.update(env)
    args = ["-m", "gateway.cli", "stdio", endpoint, *(["--data-dir", str(data_dir)] if data_dir else [])]
    return StdioServerParameters(command=sys.executable, args=args, env=environ, cwd=str(tmp_path))


async def _names(client: Client) -> set[str]:
    names, cursor = set(), None
    while True:
        page = await client.list_tools(cursor=cursor)
        names |= {tool.name for tool in page.tools}
        cursor = page.next_cursor
        if not cursor:
            return names


async def _rag_and_query(tmp_path: Path, data_dir: Path | None, env: dict[str, dict[str, str]], mode: str) -> None:
    async with Client(_params(data_dir, "rag", tmp_path, **env.get("rag", {})), mode=mode, raise_exceptions=True) as rag:
        assert {"rag.search_hybrid", "rag.search_fts", "rag.admin.stats"} <= await _names(rag)
        stats = await rag.call_tool("rag.admin.stats", {})
        assert stats.is_error is False, stats
        search = await rag.call_tool("rag.search_fts", {"query": "anything", "k": 3})
        assert search.is_error is False and "results" in search.structured_content, search
        refused = await rag.call_tool("rag.search_fts", {"query": "", "k": 3})  # a tool error comes back as one
        assert refused.is_error is True
    async with Client(_params(data_dir, "query", tmp_path, **env.get("query", {})), mode=mode, raise_exceptions=True) as query:
        assert {"run_sql_readonly", "list_targets", "explain_sql"} <= await _names(query)
        rows = await query.call_tool("run_sql_readonly", {"target_id": "notes", "sql": "SELECT id, body FROM notes ORDER BY id"})
        assert rows.is_error is False, rows
        assert rows.structured_content["rows"] == [[1, "first"], [2, "second"]]


def _notes_target(tmp_path: Path) -> list[str]:
    path = tmp_path / "notes.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.executemany("INSERT INTO notes VALUES (?, ?)", [(1, "first"), (2, "second")])
    conn.commit()
    conn.close()
    return [
        f"INSERT INTO mcp_target_profiles (target_id, protocol, database) VALUES ('notes', 'sqlite', '{path}')",
        "LOAD MCP PROFILES TO RUNTIME",
        "SAVE MCP PROFILES TO DISK",
    ]


def test_the_sdk_stdio_client_through_a_running_gateway(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # its run file: how `stdio` finds it without --data-dir
    with start_gateway() as gateway:
        with gateway.client() as http:
            for statement in _notes_target(tmp_path):
                assert call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})["isError"] is False
        env = {"rag": {"MCP_GATEWAY_TOKEN": gateway.tokens["rag"]}, "query": {"XDG_RUNTIME_DIR": str(tmp_path)}}
        # rag: the token from the environment; query: found through the run file, the token from the data directory
        anyio.run(_rag_and_query, tmp_path, None, env, "auto")
        anyio.run(_rag_and_query, tmp_path, gateway.data_dir, {}, "legacy")


def test_the_sdk_stdio_client_with_no_gateway_running(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    from gateway import audit
    from gateway.admin_sql import AdminSQL
    from gateway.startup import prepare

    data_dir = tmp_path / "data"
    store = prepare(data_dir).store
    for statement in _notes_target(tmp_path):
        AdminSQL(store).execute(statement, actor=audit.CLI_ACTOR)
    store.close()
    anyio.run(_rag_and_query, tmp_path, data_dir, {}, "auto")
    assert not list((tmp_path / "mcp-gateway").glob("*.json")), "the gateway it started is stopped"
