"""Prompt building and reply parsing: bounded context, relevant tables first, SQL found in replies."""

from __future__ import annotations

from handlers.ai.prompts import TableInfo, estimate_tokens, extract_sql, rows_preview, schema_context


def _tables(n: int) -> list[TableInfo]:
    tables = [TableInfo("shop", f"misc_{i:03d}", [{"name": f"col_{j}", "type": "int"} for j in range(8)]) for i in range(n)]
    tables.append(
        TableInfo("shop", "customers", [{"name": "id", "type": "int", "key": "PRI"}, {"name": "email", "type": "varchar(200)"}])
    )
    return tables


def test_context_is_bounded_and_puts_relevant_tables_first() -> None:
    context, included, left_out = schema_context(_tables(300), "How many customers have an email?", max_tokens=400)
    assert estimate_tokens(context) <= 420
    assert context.startswith("TABLE shop.customers")
    assert included + left_out == 301 and left_out > 250
    assert f"{left_out} more table(s) not shown" in context


def test_small_schema_fits_whole() -> None:
    context, included, left_out = schema_context(_tables(2), "anything", max_tokens=2000)
    assert (included, left_out) == (3, 0) and "not shown" not in context


def test_extract_sql_from_fences_prose_and_nothing() -> None:
    assert extract_sql("Here you go:\n```sql\nSELECT count(*) FROM customers;\n```\nDone.") == "SELECT count(*) FROM customers"
    assert extract_sql("The answer is: with x as (select 1) select * from x") == "with x as (select 1) select * from x"
    assert extract_sql("I cannot help with that.") is None


def test_rows_preview_is_cut_and_says_so() -> None:
    text = rows_preview(["id", "name"], [[i, f"name {i}"] for i in range(1000)], max_chars=200)
    assert len(text) < 260 and "more row(s) not shown" in text and text.startswith("id\tname")
