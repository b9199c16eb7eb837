"""LOAD-time checks of custom SQL tools (backends/custom_tools.py) and the binding of their values
(backends/binding.py), without a server: placeholders found only outside strings and comments,
each engine's placeholder style, every parameter-spec error named, identifiers only from enum."""

from __future__ import annotations

import json
from typing import Any

import pytest

from backends.binding import bind
from backends.custom_tools import compile_statement, input_model, parse_params, render
from backends.engines import ENGINES


def compiled(sql: str, params: list[dict[str, Any]], protocol: str = "pgsql") -> tuple[str, list[str]]:
    errors: list[str] = []
    parsed = parse_params(json.dumps(params), "p", errors)
    return compile_statement(sql, parsed, ENGINES[protocol], 100, "s", errors), errors


@pytest.mark.parametrize("protocol", ["mysql", "pgsql", "sqlite"])
def test_placeholders_outside_strings_and_comments_become_bound_values(protocol: str) -> None:
    sql = "SELECT id, ':x' AS s FROM t WHERE a = :x AND b IN (:ids) /* :y */ AND c LIKE '50%' -- :z"
    text, errors = compiled(
        sql, [{"name": "x", "type": "string"}, {"name": "ids", "type": "array", "items": "integer"}], protocol
    )
    assert errors == []
    engine = ENGINES[protocol]
    runnable, values = bind(text, engine, {"x": "it's", "ids": [1, 2, 3]})
    assert values == ["it's", 1, 2, 3]
    assert "it's" not in runnable and "':x'" in runnable
    marks = {"mysql": ["%s"] * 4, "pgsql": ["$1", "$2", "$3", "$4"], "sqlite": ["?"] * 4}[protocol]
    for mark in marks:
        assert mark in runnable
    if protocol == "mysql":
        assert "'50%%'" in runnable  # pymysql formats with %: a literal % is doubled
    empty, none = bind(text, engine, {"x": "a", "ids": []})
    assert "IN (NULL)" in empty and none == ["a"]


def test_postgres_casts_are_not_placeholders() -> None:
    text, errors = compiled("SELECT :d::date AS d, 1::int AS one", [{"name": "d", "type": "date"}])
    assert errors == [] and "__mcp_param_d__" in text


@pytest.mark.parametrize(
    ("sql", "params", "named"),
    [
        ("SELECT * FROM t WHERE a = :a", [], "statement uses :a, which parameters does not declare"),
        ("SELECT 1", [{"name": "a", "type": "integer"}], "parameter 'a' is declared but the statement never uses :a"),
        ("UPDATE t SET a = :a", [{"name": "a", "type": "integer"}], "refused"),
        ("SELECT * FROM t; DELETE FROM t", [], "exactly one statement"),
        ("SELECT '__mcp_param_a__'", [], "must not contain"),
        ("SELECT * FROM t LIMIT :n", [{"name": "n", "type": "integer"}], "LIMIT takes no parameter"),
        ("SELECT * FROM :tbl", [{"name": "tbl", "type": "string"}], "s:"),
        ("SELECT :a", [{"name": "a", "type": "uuid"}], "type must be one of"),
        ("SELECT :a", [{"name": "a", "type": "array"}], "items must be one of"),
        ("SELECT :a", [{"name": "a", "type": "string", "minimum": 1}], "minimum applies to integer, number and date"),
        ("SELECT :a", [{"name": "a", "type": "integer", "maximum": "x"}], "maximum must be a finite integer"),
        ("SELECT :a", [{"name": "a", "type": "string", "pattern": "("}], "pattern does not compile"),
        ("SELECT :a", [{"name": "a", "type": "identifier"}], "must list its allowed names in enum"),
        ("SELECT :a", [{"name": "a", "type": "identifier", "enum": ["x; DROP"]}], "enum must be a non-empty list of identifiers"),
        ("SELECT :a", [{"name": "a", "type": "integer", "required": True, "default": 1}], "a required parameter has no default"),
        ("SELECT :a", [{"name": "a", "type": "integer", "default": "x"}], "default is not valid"),
        ("SELECT :a", [{"name": "a", "type": "integer", "bogus": 1}], "unknown key(s) bogus"),
        ("SELECT :a", [{"name": "a", "type": "array", "items": "integer", "max_items": 100000}], "max_items must be"),
        ("SELECT :A", [{"name": "A", "type": "integer"}], "name must match"),
    ],
)
def test_each_bad_row_names_its_field(sql: str, params: list[dict[str, Any]], named: str) -> None:
    text, errors = compiled(sql, params)
    assert text == "" or errors
    assert any(named in e for e in errors), errors


def test_identifier_comes_only_from_enum_and_is_quoted_by_the_dialect() -> None:
    params = [{"name": "col", "type": "identifier", "enum": ["total", "placed on"[:6]]}]
    for protocol, quoted in (("mysql", "`total`"), ("pgsql", '"total"'), ("sqlite", '"total"')):
        text, errors = compiled("SELECT id FROM t ORDER BY :col", params, protocol)
        assert errors == []
        assert render(text, {"col": "total"}, ENGINES[protocol].dialect).endswith(quoted)
    model = input_model("t", parse_params(json.dumps(params), "p", []))
    with pytest.raises(ValueError):
        model.model_validate({"col": "id; DROP TABLE t"})


def test_input_model_bounds_and_types() -> None:
    params = parse_params(
        json.dumps([
            {"name": "n", "type": "integer", "minimum": 1, "maximum": 10},
            {"name": "d", "type": "date", "required": False},
            {"name": "s", "type": "array", "items": "string", "max_items": 2, "max_length": 3, "required": False},
            {"name": "b", "type": "boolean", "default": False},
        ]),
        "p",
        [],
    )  # fmt: skip
    model = input_model("t", params)
    schema = model.model_json_schema()
    assert schema["required"] == ["n"] and schema["properties"]["n"]["maximum"] == 10
    assert model.model_validate({"n": 3, "d": "2026-01-31"}).d.isoformat() == "2026-01-31"
    for bad in ({"n": 11}, {"n": "3"}, {"n": True}, {"n": 1, "d": 20260131}, {"n": 1, "d": "2026-02-30"},
                {"n": 1, "s": ["a", "b", "c"]}, {"n": 1, "s": ["abcd"]}, {"n": 1, "b": "yes"}, {"n": 1, "x": 1}):  # fmt: skip
        with pytest.raises(ValueError):
            model.model_validate(bad)
