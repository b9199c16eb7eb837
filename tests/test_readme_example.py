"""The README's worked example (adding a MariaDB and a PostgreSQL target with a read-only account,
LOAD and SAVE) runs verbatim: its commands are taken from README.md between the
`<!-- example:targets -->` markers, as .ci/run takes the test command, and run with bash against
the shared MariaDB and PostgreSQL and a running gateway, from an unrelated directory (the admin
CLI finds the gateway by its run file). Then the targets must answer, with no privilege warnings,
and be saved to disk."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import psycopg
import pymysql
import pytest
from server_process import REPO_ROOT, call_tool, registered_endpoints, start_gateway

pytestmark = pytest.mark.skipif(not {"query", "admin"} <= set(registered_endpoints()), reason="query and admin needed")
BEGIN, END = "<!-- example:targets -->", "<!-- /example:targets -->"


def readme_example() -> str:
    text = (REPO_ROOT / "README.md").read_text()
    assert BEGIN in text and END in text, "the README lost its example:targets markers"
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    return "\n".join(line for line in block.splitlines() if not line.startswith("```"))


def _drop_example_objects() -> None:
    """What the example creates on the shared servers (fixed names, as a reader would type them)."""
    with pymysql.connect(host="127.0.0.1", user="root", autocommit=True) as my, my.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS shop")
        cur.execute("DROP USER IF EXISTS 'mcp_reader'@'127.0.0.1'")
    with psycopg.connect(host="127.0.0.1", user="postgres", dbname="postgres", autocommit=True) as pg:
        pg.execute("DROP DATABASE IF EXISTS inventory WITH (FORCE)")
        with contextlib.suppress(psycopg.Error):
            pg.execute("DROP ROLE IF EXISTS mcp_reader")


def _cli_on_path(bin_dir: Path) -> None:
    """`mcp-gateway` as the README calls it, running this checkout's code."""
    bin_dir.mkdir()
    shim = bin_dir / "mcp-gateway"
    shim.write_text(f'#!/bin/sh\nPYTHONPATH="{REPO_ROOT}" exec "{sys.executable}" -m gateway.cli "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)


def test_readme_target_example_runs_verbatim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = readme_example()
    for needed in ("mcp-gateway admin", "LOAD MCP PROFILES TO RUNTIME", "SAVE MCP PROFILES TO DISK", "mariadb ", "psql "):
        assert needed in script, needed
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    _cli_on_path(tmp_path / "bin")
    workdir = tmp_path / "work"
    workdir.mkdir()
    _drop_example_objects()
    try:
        with start_gateway() as gateway:
            env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
            run = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", script], cwd=workdir, env=env, capture_output=True, text=True, timeout=120
            )
            assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
            assert '"effective"' in run.stdout or "effective" in run.stdout, run.stdout
            with gateway.client() as http:
                shop = call_tool(
                    http,
                    gateway,
                    "query",
                    "run_sql_readonly",
                    {"target_id": "shop", "sql": "SELECT customer FROM orders ORDER BY id"},
                )
                assert shop["isError"] is False, shop
                assert shop["structuredContent"]["rows"] == [["ada"], ["grace"]]
                parts = call_tool(
                    http,
                    gateway,
                    "query",
                    "run_sql_readonly",
                    {"target_id": "inventory", "sql": "SELECT name FROM parts ORDER BY id"},
                )
                assert parts["isError"] is False, parts
                assert parts["structuredContent"]["rows"] == [["bolt"], ["nut"]]
                targets = call_tool(http, gateway, "query", "list_targets", {})["structuredContent"]["targets"]
                assert {t["target_id"] for t in targets} == {"shop", "inventory"}, targets
                statement = "SELECT target_id, privilege_warnings FROM runtime_mcp_target_profiles ORDER BY target_id"
                rows = call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})["structuredContent"]["rows"]
                assert rows == [["inventory", "[]"], ["shop", "[]"]], rows  # read-only accounts: nothing to warn about
            with contextlib.closing(sqlite3.connect(f"file:{gateway.data_dir / 'disk.db'}?mode=ro", uri=True)) as disk:
                saved = {r[0] for r in disk.execute("SELECT target_id FROM mcp_target_profiles")}
            assert saved == {"shop", "inventory"}  # SAVE ... TO DISK: a restart serves them too
        assert list(workdir.iterdir()) == []  # the CLI created nothing where it ran
    finally:
        _drop_example_objects()


RAG_BEGIN, RAG_END = "<!-- example:rag-source -->", "<!-- /example:rag-source -->"


def readme_rag_example() -> str:
    text = (REPO_ROOT / "README.md").read_text()
    assert RAG_BEGIN in text and RAG_END in text, "the README lost its example:rag-source markers"
    block = text.split(RAG_BEGIN, 1)[1].split(RAG_END, 1)[0]
    return "\n".join(line for line in block.splitlines() if not line.startswith("```"))


def _drop_rag_example_objects() -> None:
    with pymysql.connect(host="127.0.0.1", user="root", autocommit=True) as my, my.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS helpdesk")
        cur.execute("DROP USER IF EXISTS 'kb_reader'@'127.0.0.1'")


@pytest.mark.skipif("rag" not in registered_endpoints(), reason="the rag endpoint is needed")
def test_readme_rag_source_example_runs_verbatim_and_searches_the_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29: adding a RAG source was undocumented. The README's example (a MariaDB table with a
    watermark, a read-only account, the target, the rag_sources row, LOAD/SAVE, `rag sync`) runs as
    is; then a search finds the user's rows, and an edited row is re-indexed by the next sync."""
    script = readme_rag_example()
    for needed in ("LOAD RAG SOURCES TO RUNTIME", "SAVE RAG SOURCES TO DISK", "mcp-gateway rag sync", "doc_map_json"):
        assert needed in script, needed
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    _cli_on_path(tmp_path / "bin")
    workdir = tmp_path / "work"
    workdir.mkdir()
    _drop_rag_example_objects()
    try:
        with start_gateway() as gateway:  # the default embedder: the local model, as a reader's gateway has
            env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
            run = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", script], cwd=workdir, env=env, capture_output=True, text=True, timeout=240
            )
            assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
            status = json.loads(run.stdout.strip().splitlines()[-1])  # `rag sync` prints the job's outcome last
            assert status["state"] == "ok" and status["sources"][0]["docs_written"] == 3, status

            def search(query: str) -> list[dict]:
                arguments = {"query": query, "k": 3, "filters": {"source_names": ["helpdesk_articles"]}}
                with gateway.client() as http:
                    result = call_tool(http, gateway, "rag", "rag.search_hybrid", arguments)
                assert result["isError"] is False, result
                return result["structuredContent"]["results"]

            hits = search("my printer is offline")
            assert hits[0]["doc_id"] == "article:2" and hits[0]["metadata"] == {"category": "hardware"}, hits
            assert search("forgot my password")[0]["doc_id"] == "article:1"
            # The watermark: an edited row is re-read by the next sync (and only it is re-embedded).
            with pymysql.connect(host="127.0.0.1", user="root", database="helpdesk", autocommit=True) as my, my.cursor() as cur:
                cur.execute(
                    "UPDATE articles SET body = 'Hold the reset button of the modem for ten seconds, then wait for the lights.',"
                    " title = 'Modem keeps dropping the connection', updated_at = CURRENT_TIMESTAMP + INTERVAL 1 SECOND WHERE id = 3"
                )
            again = subprocess.run(
                ["bash", "-c", "mcp-gateway rag sync --source helpdesk_articles --quiet"],
                cwd=workdir,
                env=env,
                capture_output=True,
                text=True,
                timeout=240,
            )
            assert again.returncode == 0, again.stderr[-2000:]
            resync = json.loads(again.stdout.strip().splitlines()[-1])["sources"][0]
            assert resync["chunks_embedded"] == 1, resync  # the unchanged articles kept their vectors
            assert search("reset the modem")[0]["doc_id"] == "article:3"
            with contextlib.closing(sqlite3.connect(f"file:{gateway.data_dir / 'disk.db'}?mode=ro", uri=True)) as disk:
                saved = [r[0] for r in disk.execute("SELECT name FROM rag_sources")]
            assert saved == ["helpdesk_articles"]  # SAVE RAG SOURCES TO DISK
        assert list(workdir.iterdir()) == []
    finally:
        _drop_rag_example_objects()
