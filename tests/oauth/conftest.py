"""Fixtures of the OAuth tests: a real OpenID provider (tests/oauth/oidc.py) and a PostgreSQL
table under row-level security keyed on current_setting('app.user_id')."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from server_process import REPO_ROOT

from oauth.oidc import OidcProvider, start_oidc_provider


@pytest.fixture(scope="module")
def provider() -> Iterator[OidcProvider]:
    with start_oidc_provider() as running:
        yield running


def readme_rls_example() -> str:
    """The SQL between the README's `<!-- example:rls -->` markers."""
    text = (REPO_ROOT / "README.md").read_text()
    block = text.split("<!-- example:rls -->", 1)[1].split("<!-- /example:rls -->", 1)[0]
    return block.split("```sql", 1)[1].split("```", 1)[0]


@pytest.fixture(scope="module")
def rls_db(postgres_db: dict) -> Iterator[dict[str, Any]]:
    role, password = f"mcpgw_rls_{secrets.token_hex(4)}", secrets.token_hex(12)
    with psycopg.connect(**postgres_db, autocommit=True) as pg:
        # the README's worked example, verbatim but for the role's name and password
        pg.execute(readme_rls_example().replace("mcp_agent", role).replace("'change-me'", f"'{password}'"))
        pg.execute("INSERT INTO notes (owner, body) SELECT 'alice', 'alice-note-' || i FROM generate_series(1, 5) i")
        pg.execute("INSERT INTO notes (owner, body) SELECT 'bob', 'bob-note-' || i FROM generate_series(1, 3) i")
        # per-user accounts: the interns' role may read notes, not salaries
        pg.execute(f"CREATE ROLE {role}_intern LOGIN PASSWORD '{password}' NOSUPERUSER NOBYPASSRLS")
        pg.execute("CREATE TABLE salaries (who text, amount int)")
        pg.execute("INSERT INTO salaries VALUES ('alice', 100), ('bob', 50)")
        pg.execute(f"GRANT SELECT ON notes TO {role}_intern")
        pg.execute(f"GRANT SELECT ON salaries TO {role}")
    try:
        yield {**postgres_db, "role": role, "intern_role": f"{role}_intern", "password": password}
    finally:
        with psycopg.connect(**postgres_db, autocommit=True) as pg:
            pg.execute("DROP TABLE IF EXISTS notes")
            pg.execute("DROP TABLE IF EXISTS salaries")
            pg.execute(f"DROP ROLE IF EXISTS {role}")
            pg.execute(f"DROP ROLE IF EXISTS {role}_intern")
