"""The README's worked example of custom tools and a toolset ("Custom tools and toolsets"), run
verbatim against real MariaDB and PostgreSQL targets, then used as the support agent would:
through the official MCP SDK client on /mcp/support with the toolset's own token."""

from __future__ import annotations

import re
from collections.abc import Iterator

import psycopg
import pymysql
import pytest
from server_process import REPO_ROOT, GatewayProcess, start_gateway
from test_custom_tools import admin, sdk, tool_names, wait_for

ORDERS = [(1, 7, "2026-01-05", "12.50", "open"), (2, 7, "2026-02-10", "99.00", "shipped"), (3, 8, "2026-02-11", "5.00", "open")]


def example_statements() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text()
    block = re.search(r"<!-- custom-tools-example:begin -->\n```sql\n(.*?)```\n<!-- custom-tools-example:end -->", text, re.S)
    assert block, "the README lost its custom tools example"
    return [s.strip() for s in re.split(r";\s*\n", block.group(1)) if s.strip()]


def token_in_readme() -> str:
    return re.search(r"'(support-token-[\w-]+)'", (REPO_ROOT / "README.md").read_text()).group(1)


@pytest.fixture(scope="module")
def gateway(mariadb_db: dict, postgres_db: dict) -> Iterator[GatewayProcess]:
    create = "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, placed_on DATE, total DECIMAL(10,2), status VARCHAR(20))"
    with pymysql.connect(**mariadb_db, autocommit=True) as my, my.cursor() as cur:
        cur.execute(create)
        cur.executemany("INSERT INTO orders VALUES (%s, %s, %s, %s, %s)", ORDERS)
    with psycopg.connect(**postgres_db, autocommit=True) as pg:
        pg.execute(create)
        pg.cursor().executemany("INSERT INTO orders VALUES (%s, %s, %s, %s, %s)", ORDERS)
    with start_gateway() as process:
        for statement in (
            "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('my', 'root', '')",
            "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('pg', 'postgres', 'trust')",
            "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id) "
            f"VALUES ('shop_maria', 'mysql', '127.0.0.1', {mariadb_db['port']}, '{mariadb_db['database']}', 'my')",
            "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id) "
            f"VALUES ('shop_pg', 'pgsql', '127.0.0.1', {postgres_db['port']}, '{postgres_db['dbname']}', 'pg')",
            "LOAD MCP PROFILES TO RUNTIME",
        ):
            admin(process, statement)
        yield process


def test_readme_example_runs_verbatim(gateway: GatewayProcess) -> None:
    statements = example_statements()
    assert len(statements) == 7
    for statement in statements:
        admin(gateway, statement)
    token = token_in_readme()
    wait_for(lambda: "sample_rows" not in tool_names(gateway, "query"))
    wait_for(lambda: gateway.client().post("/mcp/support").status_code != 404)
    listed, (maria, pg, sql) = sdk(
        gateway,
        "support",
        [
            ("customer_orders", {"customer_id": 7, "date_from": "2026-01-01", "date_to": "2026-12-31", "statuses": ["open"]}),
            ("customer_orders_pg", {"customer_id": 7, "date_from": "2026-02-01", "date_to": "2026-02-28"}),
            ("run_sql_readonly", {"sql": "SELECT count(*) AS n FROM orders"}),
        ],
        token=token,
    )
    assert sorted(t.name for t in listed.tools) == ["customer_orders", "customer_orders_pg", "list_tables", "run_sql_readonly"]
    assert [row[0] for row in maria.structured_content["rows"]] == [1], maria.structured_content
    assert [row[0] for row in pg.structured_content["rows"]] == [2], pg.structured_content
    assert sql.structured_content["target_id"] == "shop_pg" and sql.structured_content["rows"] == [[3]]
    assert "sample_distinct" not in tool_names(gateway, "query")
