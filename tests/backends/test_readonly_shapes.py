"""The read-only check's shape cache (backends/readonly.py, "shapes"): a statement that
differs from a checked one only in plain literals is answered from that statement's template.

What must hold: the answer from a template is what the full check would run (or, where sqlglot
rewrites a literal's value, text that the full check reads to the same statement); anything but
a plain literal - quotes, backslashes, signs, exponents, LIMIT counts, the nonce - takes the full
check; refusals are never learnt; and the template path is really taken (the full check's own
cache sees no new call).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends import readonly
from backends.engines import engine_for
from backends.readonly import check_readonly
from gateway.errors import InvalidArgument


def full_check(sql: str, protocol: str, row_cap: int | None) -> readonly.CheckedStatement:
    """The check itself, no cache of any kind."""
    return readonly._check_cached.__wrapped__(sql, engine_for(protocol).readonly, row_cap)


TEMPLATES = [
    ("pgsql", "SELECT id, name FROM items WHERE id = {n}"),
    ("pgsql", "SELECT * FROM items WHERE name = {s} AND price > {n} ORDER BY id LIMIT 10"),
    ("pgsql", "SELECT id FROM items WHERE id IN ({n}, {n}, {n})"),
    ("pgsql", "SELECT lower({s}) AS x, {n} + 1, -{n}"),
    ("pgsql", "SELECT CASE WHEN price > {n} THEN {s} ELSE {s} END FROM items"),
    ("pgsql", "SELECT * FROM items WHERE created > now() - INTERVAL {s}"),
    ("pgsql", "SELECT to_char(created, {s}), {s} || name FROM items WHERE name LIKE {s}"),
    ("pgsql", "SELECT * FROM items WHERE id = {n} LIMIT {n} OFFSET {n}"),
    ("pgsql", "SELECT CAST({s} AS DATE), {s}::int FROM items -- {s}\n"),
    ("mysql", "SELECT id, name FROM items WHERE id = {n}"),
    ("mysql", "SELECT * FROM items WHERE name = {s} OR note LIKE {s} LIMIT {n}, {n}"),
    ("mysql", "SELECT DATE_FORMAT(created, {s}), CONCAT({s}, name) FROM items"),
    ("mysql", "SELECT * FROM items WHERE created > NOW() - INTERVAL {n} DAY AND id IN ({n},{n})"),
    ("sqlite", "SELECT * FROM items WHERE id = {n} AND name = {s}"),
]

PRINTABLE = st.characters(min_codepoint=32, max_codepoint=126)
NUMBERS = st.one_of(st.integers(0, 10**20).map(str), st.sampled_from(["007", "1e5", "0x1F", "1.5", "-1", "00"]))


def literal(value: str, protocol: str) -> str:
    escaped = value.replace("'", "''")
    if protocol == "mysql":
        escaped = escaped.replace("\\", "\\\\")
    return f"'{escaped}'"


def fill(template: str, protocol: str, numbers: list[str], strings: list[str]) -> str:
    numbers, strings = list(numbers), list(strings)
    out, rest = [], template
    while "{" in rest:
        head, _, tail = rest.partition("{")
        out.append(head)
        out.append(numbers.pop() if tail[0] == "n" else literal(strings.pop(), protocol))
        rest = tail[2:]
    return "".join(out) + rest


def outcome(check, sql: str, protocol: str) -> str | tuple[str, str]:
    try:
        return check(sql, protocol, 51).sql
    except InvalidArgument as exc:
        return ("refused", str(exc))


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(TEMPLATES),
    numbers=st.lists(NUMBERS, min_size=12, max_size=12),
    strings=st.lists(st.text(PRINTABLE, max_size=12), min_size=12, max_size=12),
    seed_numbers=st.lists(st.integers(1, 99).map(str), min_size=12, max_size=12),
    seed_strings=st.lists(st.text("abcxyz 0123", max_size=5), min_size=12, max_size=12),
)
def test_a_template_answers_what_the_full_check_would(
    case: tuple[str, str], numbers: list[str], strings: list[str], seed_numbers: list[str], seed_strings: list[str]
) -> None:
    protocol, template = case
    check_readonly(fill(template, protocol, seed_numbers, seed_strings), engine_for(protocol), row_cap=51)  # learn the shape
    sql = fill(template, protocol, numbers, strings)
    shaped = outcome(lambda s, p, c: check_readonly(s, engine_for(p), row_cap=c), sql, protocol)
    full = outcome(full_check, sql, protocol)
    if shaped != full:
        # sqlglot rewrites some literal values (INTERVAL '1 day' -> INTERVAL '1' DAY); the
        # template keeps the caller's value. The full check must read both to one statement.
        assert isinstance(shaped, str) and isinstance(full, str), (sql, shaped, full)
        assert full_check(shaped, protocol, 51).sql == full, (sql, shaped, full)


def test_the_template_path_is_taken_and_costs_no_full_check() -> None:
    check_readonly("SELECT id FROM shapes_probe WHERE id = 1 AND name = 'a'", engine_for("pgsql"), row_cap=11)
    misses = readonly._check_cached.cache_info().misses
    checked = check_readonly("SELECT id FROM shapes_probe WHERE id = 987 AND name = 'b c'", engine_for("pgsql"), row_cap=11)
    assert readonly._check_cached.cache_info().misses == misses
    assert checked.sql == "SELECT id FROM shapes_probe WHERE id = 987 AND name = 'b c' LIMIT 11"
    assert checked.kind == "select"


@pytest.mark.parametrize(
    ("protocol", "hostile"),
    [
        ("mysql", "SELECT id FROM shapes_q WHERE name = 'x\\' OR sleep(5) -- '"),  # backslash: not plain
        ("mysql", "SELECT id FROM shapes_q WHERE name = 'x'' OR sleep(5) -- '"),  # doubled quote: not plain
        ("pgsql", "SELECT id FROM shapes_q WHERE name = 'x'' OR pg_sleep(5) IS NULL -- '"),
        ("mysql", "SELECT id FROM shapes_q WHERE name = '/*! x */'"),  # looks like a conditional comment
    ],
)
def test_values_that_are_not_plain_take_the_full_check(protocol: str, hostile: str) -> None:
    check_readonly("SELECT id FROM shapes_q WHERE name = 'safe'", engine_for(protocol), row_cap=11)
    assert outcome(lambda s, p, c: check_readonly(s, engine_for(p), row_cap=c), hostile, protocol) == outcome(
        full_check, hostile, protocol
    )


def test_limit_counts_stay_part_of_the_shape() -> None:
    assert (
        check_readonly("SELECT a FROM shapes_l LIMIT 5", engine_for("pgsql"), row_cap=101).sql == "SELECT a FROM shapes_l LIMIT 5"
    )
    assert (
        check_readonly("SELECT a FROM shapes_l LIMIT 5000", engine_for("pgsql"), row_cap=101).sql
        == "SELECT a FROM shapes_l LIMIT 101"
    )
    assert (
        check_readonly("SELECT a FROM shapes_l LIMIT 1, 5000", engine_for("mysql"), row_cap=101).sql
        == "SELECT a FROM shapes_l LIMIT 101 OFFSET 1"
    )


def test_a_refusal_is_never_learnt_and_the_nonce_is_never_trusted() -> None:
    for _ in range(2):
        with pytest.raises(InvalidArgument):
            check_readonly("SELECT pg_read_file('/etc/passwd')", engine_for("pgsql"), row_cap=11)
    assert not [key for key in readonly._shapes if "pg_read_file" in key[0]]
    nonce_text = f"SELECT {readonly._NONCE}000000 AS n FROM shapes_n WHERE id = 1"
    assert readonly._check_by_shape(nonce_text, engine_for("pgsql").readonly, 11) is None
    assert check_readonly(nonce_text, engine_for("pgsql"), row_cap=11).sql == full_check(nonce_text, "pgsql", 11).sql


def test_long_statements_are_not_cached() -> None:
    """At most a few thousand cache entries of at most CACHED_SQL_CHARS each: a caller cannot
    fill the gateway's memory with distinct 64 KiB statements."""
    padding = " AND name <> 'x'" * (readonly.CACHED_SQL_CHARS // 16)
    shapes, misses = len(readonly._shapes), readonly._check_cached.cache_info().misses
    for i in range(3):
        checked = check_readonly(f"SELECT id FROM shapes_long WHERE id = {i}{padding}", engine_for("pgsql"), row_cap=11)
        assert checked.sql.startswith(f"SELECT id FROM shapes_long WHERE id = {i} AND")
    assert len(readonly._shapes) == shapes
    assert readonly._check_cached.cache_info().misses == misses


def _other_values(sql: str, protocol: str) -> str | None:
    """The statement with every plain literal given another plain value (same shape), or None
    when it has none."""
    shape = readonly._shape_of(sql, engine_for(protocol).dialect) if "\x00" not in sql else None  # NUL: refused before shapes
    if shape is None:
        return None
    masked, values, kinds = shape
    pieces = masked.split("\x00")
    out = [pieces[0]]
    for value, kind, piece in zip(values, kinds, pieces[1:], strict=True):
        out.append(str(int(value) + 1) if kind == "N" else f"'{value}x'")
        out.append(piece[1:])
    return "".join(out)


def _hostile() -> list[tuple[str, str]]:
    from tests.backends.test_readonly_hostile import MYSQL_HOSTILE, PG_HOSTILE
    from tests.backends.test_readonly_parser import SQLITE_HOSTILE

    return [("mysql", s) for s in MYSQL_HOSTILE] + [("pgsql", s) for s in PG_HOSTILE] + [("sqlite", s) for s in SQLITE_HOSTILE]


@pytest.mark.parametrize(("protocol", "sql"), _hostile())
def test_no_value_variant_of_a_hostile_statement_teaches_a_shape(protocol: str, sql: str) -> None:
    """The whole hostile corpus, each statement after the same shape with other values was
    checked first: still refused, and no template was learnt for that shape."""
    variant = _other_values(sql, protocol)
    if variant is not None:
        with pytest.raises(InvalidArgument):
            check_readonly(variant, engine_for(protocol), row_cap=11)
    with pytest.raises(InvalidArgument):
        check_readonly(sql, engine_for(protocol), row_cap=11)
    shape = readonly._shape_of(sql, engine_for(protocol).dialect) if "\x00" not in sql else None
    if shape is not None:
        assert readonly._shapes.get((shape[0], engine_for(protocol).readonly, 11)) is None
