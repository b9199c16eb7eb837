"""A fast, quiet command line (issue 29, item 5): `mcp-gateway --help` and `mcp-gateway admin`
against a running gateway import no handler, backend or heavy library (drivers, sqlglot, numpy,
the embedder: most of a second of import time), print no `INFO httpx` line, and a plain SELECT
reports no changes. The time itself is measured outside the tests (bench, issue note), not here.
The handlers' sub-commands listed without importing the handlers are the ones their add_cli adds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from server_process import REPO_ROOT, start_gateway

HEAVY = ("handlers.rag", "handlers.query", "backends.engines", "backends.readonly", "sqlglot", "psycopg", "pymysql",
         "numpy", "onnxruntime", "redis", "uvicorn", "httpx", "pydantic")  # fmt: skip
# Runs the command line in-process, then reports which modules it imported.
PROBE = """
import json, sys
from gateway.cli import main
try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
with open(sys.argv[1], "w") as fh:
    json.dump({"code": code, "modules": sorted(sys.modules)}, fh)
"""


def _probe(tmp_path: Path, *args: str) -> tuple[dict, subprocess.CompletedProcess[str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))}
    report = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(report), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    return json.loads(report.read_text()), done


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_help_imports_nothing_heavy_and_lists_every_command(tmp_path: Path) -> None:
    report, done = _probe(tmp_path, "--help")
    assert report["code"] == 0, done.stderr
    assert _heavy(report["modules"]) == [], _heavy(report["modules"])
    for command in ("serve", "admin", "backup", "restore", "healthcheck", "rag", "query"):
        assert f"    {command} " in done.stdout, done.stdout


def test_the_handler_commands_listed_are_those_add_cli_adds() -> None:
    from gateway.assembly import handler_commands
    from gateway.cli import build_parser

    def commands(parser) -> dict[str, str]:
        sub = next(a for a in parser._actions if a.dest == "command")
        return {c.dest: c.help for c in sub._choices_actions}

    full, light = commands(build_parser()), commands(build_parser(with_handlers=False))
    assert full == light  # the same names and help, whether the handlers are imported or not
    assert set(handler_commands()) <= set(full)


def test_admin_against_a_running_gateway_is_light_quiet_and_exact(tmp_path: Path) -> None:
    with start_gateway() as gateway:
        report, done = _probe(tmp_path, "admin", "SELECT 1", "--data-dir", str(gateway.data_dir))
        assert report["code"] == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer["rows"] == [[1]] and answer["changes"] == 0 and "running gateway" in answer["via"], answer
        assert "httpx" not in done.stderr and "INFO" not in done.stderr, done.stderr
        assert _heavy(report["modules"]) == [], _heavy(report["modules"])
        # a write still counts its rows; the next plain SELECT on the same data reports none again
        statement = "INSERT INTO mcp_query_rules (rule_id, active, match_pattern, error_msg) VALUES (9029, 0, 'x', 'no')"
        report, done = _probe(tmp_path, "admin", statement, "--data-dir", str(gateway.data_dir))
        assert json.loads(done.stdout)["changes"] == 1, done.stdout
        report, done = _probe(tmp_path, "admin", "SELECT rule_id FROM mcp_query_rules", "--data-dir", str(gateway.data_dir))
        assert json.loads(done.stdout)["changes"] == 0, done.stdout


def test_a_select_on_the_data_directory_alone_reports_no_changes(tmp_path: Path) -> None:
    from gateway.startup import prepare

    prepare(tmp_path / "data").store.close()
    report, done = _probe(
        tmp_path, "admin", "SELECT COUNT(*) FROM runtime_global_variables", "--data-dir", str(tmp_path / "data")
    )
    answer = json.loads(done.stdout)
    assert report["code"] == 0 and answer["changes"] == 0 and "data directory" in answer["via"], (answer, done.stderr)
