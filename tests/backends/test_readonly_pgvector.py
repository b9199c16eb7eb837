"""pgvector's operators through the read-only check: the checked text must mean what the caller
wrote. sqlglot reads PostgreSQL's `<=>` (pgvector's cosine distance) as MySQL's null-safe equality
and would regenerate it as IS NOT DISTINCT FROM: silently wrong rows. It is refused with the
spelling that keeps its meaning, OPERATOR(<=>), which runs on a real pgvector server."""

from __future__ import annotations

import psycopg
import pytest

from backends.engines import engine_for
from backends.readonly import check_readonly
from gateway.errors import InvalidArgument

PG = engine_for("pgsql")
QUERY = "SELECT id FROM docs ORDER BY embedding {op} '[1,0]'::vector, id LIMIT 3"


def test_bare_cosine_distance_is_refused_with_the_spelling_that_keeps_it() -> None:
    with pytest.raises(InvalidArgument, match=r"OPERATOR\(<=>\)"):
        check_readonly(QUERY.format(op="<=>"), PG, row_cap=10)


@pytest.mark.parametrize("statement", ["SELECT 'a<=>b' AS x", "SELECT 1 IS NOT DISTINCT FROM 2"])
def test_the_same_characters_elsewhere_still_pass(statement: str) -> None:
    assert check_readonly(statement, PG, row_cap=10).sql.startswith("SELECT")


@pytest.mark.parametrize("op", ["OPERATOR(<=>)", "OPERATOR(public.<=>)", "<->"])
def test_named_operators_run_as_written_on_pgvector(pgvector_db: str, op: str) -> None:
    checked = check_readonly(QUERY.format(op=op), PG, row_cap=10).sql
    assert "DISTINCT" not in checked
    with psycopg.connect(pgvector_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (id int PRIMARY KEY, embedding vector(2))")
        conn.execute("INSERT INTO docs VALUES (1, '[0,1]'), (2, '[1,0.1]'), (3, '[-1,0]'), (4, '[1,0]')")
        ids = [row[0] for row in conn.execute(checked).fetchall()]
    assert ids == [4, 2, 1]  # nearest to [1,0] first, whichever distance
