"""Layer 3 of read-only SQL: a sqlglot allowlist over the whole statement tree.

`check_readonly(sql, engine)` accepts exactly one SELECT / WITH ... SELECT / set operation,
the other read forms the engine declares (its `ReadOnlyRules`, backends/engines: SHOW and
DESCRIBE <table> for MySQL/MariaDB, SHOW <setting> for PostgreSQL, EXPLAIN QUERY PLAN for
SQLite), or a plain EXPLAIN of a SELECT, and returns the statement *regenerated* from the
checked tree. The regenerated text is what runs, so a parser differential (a comment, a MySQL
`--` quirk, a token sqlglot silently dropped) cannot smuggle anything past the check: what was
checked is what executes. The regenerated text is parsed and checked once more, so a generator
quirk cannot produce an unchecked statement. A statement that differs from a checked one only
in plain literal values reuses that one's proven template instead of being parsed (see
"shapes" below: ~13 us instead of ~113 us).

Refused anywhere in the tree: DML/DDL and writable CTEs, INTO (OUTFILE, DUMPFILE, @var,
a new table), locking clauses (FOR UPDATE/SHARE, LOCK IN SHARE MODE), SET/CALL/DO/PREPARE/
EXECUTE/HANDLER/LOCK and anything sqlglot only understands as an opaque `Command`, variable
assignment (`:=`), bind placeholders, and calls to the file, network, lock, sleep and admin
functions every engine declares (DENIED_FUNCTIONS, DENIED_PREFIXES) - at any node, including
table functions in FROM. A plain table name is the statement's own engine's matter: its denied
functions (SQLite reads `FROM fsdir WHERE name = '/etc'` as the call), its credential catalogs
(`ReadOnlyRules.denied_tables`, `denied_schemas`) and, where the engine reads a name that looks
like a file as that file (DuckDB: `FROM '/etc/passwd'`, `ReadOnlyRules.replacement_scans`), such
names. MySQL conditional comments (`/*! */`, `/*M! */`) are refused on the raw text because
MySQL executes them. Anything that does not parse is refused (fail closed).
The sampling tools' `columns`, `where` and `order_by` go through `parse_fragment`: parsed
alone, one clause only, the same tree check, and rebuilt from nodes.

`current_setting()` is allowed: it only reads, and PostgreSQL itself hides the sensitive
settings (data_directory, ...) from roles without pg_read_all_settings.
"""

from __future__ import annotations

import functools
import logging
import re
import secrets
import threading
from dataclasses import dataclass
from typing import Any

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError
from sqlglot.parser import Parser
from sqlglot.tokens import Token, Tokenizer, TokenType

from backends.engines import ENGINES
from backends.engines.base import Engine, ReadOnlyRules
from gateway.errors import InvalidArgument

# Every engine's denied functions apply to calls on every engine: a function dangerous on one (a
# file reader, a sleep) costs nothing to refuse as a call on the others. Table names are not
# calls: a table called `query` or `glob` on SQLite is a table, so a plain name is checked only
# against its own engine's rules (check_tree; there its own function names count too, SQLite's
# table-valued functions being tables that take their arguments from WHERE).
_RULES = [engine.readonly for engine in ENGINES.values()]
DENIED_FUNCTIONS = frozenset(name for rules in _RULES for name in rules.denied_functions)  # exact names, lower case
DENIED_PREFIXES = tuple(dict.fromkeys(prefix for rules in _RULES for prefix in rules.denied_prefixes))  # families
_RULES_OF_DIALECT = {rules.dialect: rules for rules in _RULES}
# What makes a table name a path for an engine with replacement scans: a file name has a dot
# (which extensions count depends on the engine's loaded extensions, so any dot does), a path a
# separator, a URL a colon, a glob its wildcards.
_PATH_LIKE = re.compile(r"[./\\:*?\[]")

_DENIED_NODE_NAMES = (
    "Insert", "Update", "Delete", "Merge", "Create", "Drop", "Alter", "TruncateTable", "Command",
    "Into", "Lock", "Set", "SetItem", "Copy", "Transaction", "Commit", "Rollback", "Use", "Pragma",
    "Attach", "Detach", "LoadData", "Grant", "Revoke", "Kill", "Analyze", "Placeholder",
    "PropertyEQ", "Cache", "Uncache", "Refresh", "Execute", "Call", "Summarize", "Returning",
)  # fmt: skip
DENIED_NODES: tuple[type[exp.Expression], ...] = tuple(getattr(exp, n) for n in _DENIED_NODE_NAMES if hasattr(exp, n))
QUERY_ROOTS: tuple[type[exp.Expression], ...] = (exp.Select, exp.SetOperation, exp.Subquery)

CACHED_SQL_CHARS = 8192  # longer statements are checked every time (2048 + 4096 cache entries at most)
_CONDITIONAL_COMMENT = re.compile(r"/\*[!+]|/\*M!", re.IGNORECASE)  # /*! */ /*M! */ and optimizer hints
_PG_SHOW = re.compile(r"^\s*SHOW\s+(ALL|[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?)\s*;?\s*$", re.IGNORECASE)
_PLAIN_EXPLAIN = {"EXPLAIN", "DESCRIBE", "DESC"}
_MAYBE_EXPLAIN = re.compile(r"\b(EXPLAIN|DESCRIBE|DESC)\b", re.IGNORECASE)

log = logging.getLogger("mcp_gateway.query")
logging.getLogger("sqlglot").setLevel(logging.ERROR)  # "falling back to Command" is refused, not news


@dataclass(frozen=True)
class CheckedStatement:
    sql: str  # the regenerated text that will run
    kind: str  # select | show | describe | explain
    dialect: str


@functools.cache
def _dialect(name: str) -> Dialect:
    return Dialect.get_or_raise(name)  # builds a new instance per call otherwise


_local = threading.local()


def _tools(dialect: str) -> tuple[Tokenizer, Parser]:
    """This thread's tokenizer and parser for the dialect. Both reset themselves on every
    call; building them per statement cost a quarter of a parse."""
    tools = getattr(_local, "tools", None)
    if tools is None:
        tools = _local.tools = {}
    pair = tools.get(dialect)
    if pair is None:
        pair = tools[dialect] = (_dialect(dialect).tokenizer(), _dialect(dialect).parser())
    return pair


def _tokenize(sql: str, dialect: str) -> list[Token]:
    return _tools(dialect)[0].tokenize(sql)


def refuse(reason: str) -> InvalidArgument:
    return InvalidArgument(f"refused: {reason}. Only one SELECT, WITH ... SELECT, SHOW, DESCRIBE or plain EXPLAIN is accepted.")


def function_names(node: exp.Func) -> set[str]:
    if isinstance(node, exp.Anonymous):
        return {str(node.name).lower()}
    names = {node.sql_name().lower(), type(node).key.lower()}
    names.update(n.lower() for n in getattr(type(node), "_sql_names", ()) or ())
    return names


def _denied_function(name: str) -> bool:
    return name in DENIED_FUNCTIONS or name.startswith(DENIED_PREFIXES)


# What each node class needs checking for, decided once per class (isinstance against the
# tuples above for every node of every statement was a fifth of the check's time).
_PLAIN, _DENIED, _CTE, _FUNC, _TABLE = range(5)
_ROLE: dict[type, int] = {}


def _role(cls: type) -> int:
    role = _ROLE.get(cls)
    if role is None:
        if issubclass(cls, DENIED_NODES):
            role = _DENIED
        elif issubclass(cls, exp.CTE):
            role = _CTE
        elif issubclass(cls, exp.Func):
            role = _FUNC
        elif issubclass(cls, exp.Table):
            role = _TABLE
        else:
            role = _PLAIN
        _ROLE[cls] = role
    return role


def check_tree(tree: exp.Expression, rules: ReadOnlyRules) -> None:
    """Walk every node: refuse write/lock/session nodes and denied functions wherever they are,
    and the table names the statement's own engine (`rules`) refuses."""
    for node in tree.walk():
        role = _role(type(node))
        if role == _PLAIN:
            continue
        if role == _DENIED:
            raise refuse(f"{type(node).__name__.upper()} is not allowed in a read-only statement")
        if role == _CTE and not isinstance(node.this, QUERY_ROOTS):
            raise refuse("a CTE must be a SELECT (writable CTEs are refused)")
        if role == _FUNC:
            denied = sorted(n for n in function_names(node) if _denied_function(n))
            if denied:
                raise refuse(f"function {denied[0]}() is not allowed (file, network, lock, sleep or admin function)")
        if role == _TABLE:  # a table function's name is "": its call is a Func node below, checked as one
            name = str(node.name)
            if rules.replacement_scans and _PATH_LIKE.search(name):
                raise refuse(f"the table name {name!r} would be read as a file (a path is not a table)")
            if name.lower() in rules.denied_functions or name.lower().startswith(rules.denied_prefixes):
                raise refuse(f"table function {name.lower()} is not allowed")
            if name.lower() in rules.denied_tables or str(node.db).lower() in rules.denied_schemas:
                raise refuse(f"the credential catalog {node.sql()} is not readable through the gateway")


def _parse_one(sql: str, dialect: str, misread: tuple[tuple[str, str], ...] = ()) -> exp.Expression:
    tokenizer, parser = _tools(dialect)
    try:
        tokens = tokenizer.tokenize(sql)
        for index, token in enumerate(tokens if misread else ()):
            # OPERATOR(<=>) and OPERATOR(schema.<=>) name the engine's own operator: kept as written
            named = index > 0 and tokens[index - 1].token_type in (TokenType.L_PAREN, TokenType.DOT)
            for type_name, why in misread:
                if token.token_type.name == type_name and not named:
                    raise refuse(why)
        statements = [s for s in parser.parse(tokens, sql) if s is not None]
    except SqlglotError:
        raise refuse(_unparsed_reason(sql)) from None
    if len(statements) != 1:
        raise refuse(f"exactly one statement per call, got {len(statements)}")
    return statements[0]


_FILE_INTO = re.compile(r"\bINTO\s+(OUTFILE|DUMPFILE)\b", re.IGNORECASE)


def _unparsed_reason(sql: str) -> str:
    """Why a statement sqlglot cannot parse is refused: a known write named, else unknown syntax."""
    found = _FILE_INTO.search(sql)
    if found:
        return f"SELECT ... INTO {found.group(1).upper()} writes a file on the database server; it is not allowed in a read-only statement"
    return "the statement could not be parsed (unknown syntax is refused)"


def _root_kind(tree: exp.Expression, rules: ReadOnlyRules) -> str:
    if isinstance(tree, QUERY_ROOTS):
        return "select"
    if isinstance(tree, exp.Show) and rules.show_and_describe:
        return "show"
    if isinstance(tree, exp.Describe) and rules.show_and_describe:
        extra = {k for k, v in tree.args.items() if v and k not in ("this", "as_json")}
        if isinstance(tree.this, exp.Table) and not extra:
            return "describe"
        raise refuse("only plain EXPLAIN/DESCRIBE is accepted (EXPLAIN ANALYZE runs the statement; see explain_sql)")
    raise refuse(f"{type(tree).__name__.upper()} statements are not read-only")


def _explain_inner(sql: str, rules: ReadOnlyRules) -> tuple[str, str] | None:
    """For `EXPLAIN <query>`: (prefix to run, inner query text); None when not an EXPLAIN."""
    dialect = rules.dialect
    if not _MAYBE_EXPLAIN.search(sql):
        return None  # cheap pre-check; a missed EXPLAIN parses as DESCRIBE/Command and is refused
    try:
        tokens = _tokenize(sql, dialect)
    except SqlglotError:
        raise refuse("the statement could not be tokenized") from None
    if not tokens or tokens[0].text.upper() not in _PLAIN_EXPLAIN:
        return None
    # Some dialects lex EXPLAIN as a command swallowing the rest: lex the rest on its own.
    rest = sql[tokens[0].end + 1 :]
    try:
        tokens = _tokenize(rest, dialect)
    except SqlglotError:
        raise refuse("the statement could not be tokenized") from None
    if not tokens:
        raise refuse("EXPLAIN needs a statement")
    first = tokens[0].text.upper()
    if rules.explain_query_plan and first == "QUERY" and len(tokens) > 2 and tokens[1].text.upper() == "PLAN":
        return "EXPLAIN QUERY PLAN ", rest[tokens[2].start :]
    if first in ("SELECT", "WITH") or (first == "(" and not rules.explain_options_in_parentheses):
        return "EXPLAIN ", rest[tokens[0].start :]
    if (
        rules.show_and_describe
        and tokens[0].token_type.name in ("VAR", "IDENTIFIER")
        and first not in ("ANALYZE", "EXTENDED", "PARTITIONS", "FORMAT")
    ):
        return None  # DESCRIBE <table>: the parser handles it
    raise refuse("only plain EXPLAIN of a SELECT is accepted (no ANALYZE, options or other statements)")


def _row_count(node: Any) -> int | None:
    """The value of a LIMIT/FETCH count written as a plain integer; None for anything else
    (1e5, 1.5, a string, an expression), which the server might read differently."""
    if isinstance(node, exp.Literal) and not node.is_string and str(node.this).isdigit():
        return int(node.this)
    return None


def cap_rows(tree: exp.Expression, row_cap: int) -> exp.Expression:
    """Add or lower the outer LIMIT so the server stops after row_cap rows (we fetch cap = max+1)."""
    if not isinstance(tree, QUERY_ROOTS):
        return tree
    limit = tree.args.get("limit")
    if isinstance(limit, exp.Fetch):  # FETCH FIRST n ROWS [ONLY | WITH TIES]
        count = limit.args.get("count")
        options = limit.args.get("limit_options")
        if count is None:  # FETCH FIRST ROW ONLY: one row
            return tree
        rows = _row_count(count)
        if rows is not None and options is not None and not options.args.get("percent"):
            if rows > row_cap:
                limit.set("count", exp.Literal.number(row_cap))
            return tree
        raise refuse("FETCH FIRST must give a number of rows")
    current = limit.expression if isinstance(limit, exp.Limit) else None
    rows = _row_count(current)
    if rows is not None and rows <= row_cap:
        return tree
    if limit is not None and not isinstance(current, (exp.Literal, exp.Var, exp.Null)):
        # A computed LIMIT could make the server send more than the cap: refuse it.
        raise refuse("LIMIT must be a number")
    tree.set("limit", exp.Limit(expression=exp.Literal.number(row_cap)))
    return tree


def _capped(tree: exp.Expression, row_cap: int) -> bool:
    if not isinstance(tree, QUERY_ROOTS):
        return True  # SHOW / DESCRIBE: no LIMIT to carry
    limit = tree.args.get("limit")
    value = (
        limit.expression if isinstance(limit, exp.Limit) else limit.args.get("count") if isinstance(limit, exp.Fetch) else None
    )
    if isinstance(limit, exp.Fetch) and value is None:
        return True  # FETCH FIRST ROW ONLY
    rows = _row_count(value)
    return rows is not None and rows <= row_cap


def check_readonly(sql: str, engine: Engine, *, row_cap: int | None = None) -> CheckedStatement:
    """Accept one read-only statement and return the text to run, or raise InvalidArgument.

    A statement that differs from an earlier one only in plain literals is answered from that
    statement's checked shape (see "Shapes" below); every result is also remembered by the exact
    (sql, engine, row_cap). A full check costs ~110 us; agents repeat statements with new
    values. Refusals are not cached (they raise), nor statements longer than CACHED_SQL_CHARS,
    which would let a caller fill the caches with hundreds of megabytes."""
    rules = engine.readonly
    try:
        if len(sql) > CACHED_SQL_CHARS:
            return _check_cached.__wrapped__(sql, rules, row_cap)
        key = (sql, rules, row_cap)
        checked = _exact.get(key)
        if checked is None:
            checked = _check_by_shape(sql, rules, row_cap) or _check_cached(sql, rules, row_cap)
            with _shapes_lock:
                if len(_exact) >= _MAX_EXACT:
                    del _exact[next(iter(_exact))]  # the oldest
                _exact[key] = checked
        return checked
    except InvalidArgument:
        raise
    except Exception:  # a sqlglot bug on odd input (IndexError, RecursionError...): fail closed
        log.info("sqlglot failed on a statement; refused", exc_info=True)
        raise refuse("the statement could not be parsed (unknown syntax is refused)") from None


@functools.lru_cache(maxsize=2048)
def _check_cached(sql: str, rules: ReadOnlyRules, row_cap: int | None) -> CheckedStatement:
    dialect = rules.dialect
    if "\x00" in sql:
        raise refuse("NUL bytes are not allowed")
    if _CONDITIONAL_COMMENT.search(sql):
        raise refuse("MySQL conditional comments and optimizer hints (/*! */, /*M! */, /*+ */) are not allowed")
    if rules.show_setting and sql.lstrip().upper().startswith("SHOW"):
        match = _PG_SHOW.match(sql)
        if not match:
            raise refuse("SHOW takes one setting name")
        return CheckedStatement(sql=f"SHOW {match.group(1)}", kind="show", dialect=dialect)
    explain = _explain_inner(sql, rules)
    prefix, body = explain if explain else ("", sql)
    tree = _parse_one(body, dialect, rules.misread_tokens)
    while isinstance(tree, exp.Subquery) and isinstance(tree.this, exp.Query) and not tree.args.get("limit"):
        tree = tree.this  # (SELECT ...) at the top: the parentheses add nothing, and hide the LIMIT
    kind = _root_kind(tree, rules)
    if explain and kind != "select":
        raise refuse("EXPLAIN takes a SELECT")
    check_tree(tree, rules)
    if row_cap is not None and not explain:
        tree = cap_rows(tree, row_cap)
    # copy=False: the tree is ours, and copying it cost more than parsing it.
    text = _dialect(dialect).generate(tree, copy=False, comments=False)
    # What runs is checked too: the generated text must parse to one statement that passes,
    # with the row cap still on the outer query (`FROM SELECT 1` + LIMIT re-binds it inside).
    again = _parse_one(text, dialect)
    _root_kind(again, rules)
    check_tree(again, rules)
    if row_cap is not None and not explain and not _capped(again, row_cap):
        raise refuse("the row cap would not apply to the outer query; write the statement in plain form")
    return CheckedStatement(sql=prefix + text, kind="explain" if explain else kind, dialect=dialect)


# -- shapes: statements that differ only in plain literals -------------------------------------
#
# Agents send one statement with many values: WHERE id = 1, WHERE id = 2, ... A statement's
# shape is its exact text with each *plain* literal masked: an integer of digits only (no sign,
# exponent or leading zero) or a '...' string of printable ASCII without a quote or a
# backslash. Such a literal is one token of the same type whatever its value, so every other
# token of the text lexes the same, and the check never reads its value - except row counts
# (LIMIT, OFFSET, FETCH, TOP), which stay part of the shape.
#
# The first statement of a shape is checked in full twice: as written, and with each literal
# replaced by a unique sentinel (a per-process nonce that the text must not contain). The
# sentinel run's regenerated text becomes the shape's template, kept only if (1) the sentinel
# text lexes to the same token types, (2) each sentinel appears in the regenerated text exactly
# once, delimited as a literal of its kind, and (3) putting the first statement's own literals
# back into the template reproduces, character for character, what the full check regenerated
# for it. Otherwise the shape is remembered as unusable and its statements take the full check.
# A later statement of a usable shape costs a tokenisation (~5 us): its literal values go into
# the template's slots, where the template was itself parsed and checked twice.

_PLAIN_NUMBER = re.compile(r"(?:0|[1-9][0-9]{0,17})\Z")
_PLAIN_STRING = re.compile(r"[ -&(-\[\]-~]*\Z")  # printable ASCII but the quote and the backslash
_ROW_COUNT_WORDS = frozenset({"LIMIT", "OFFSET", "FETCH", "FIRST", "NEXT", "TOP"})
_NONCE = str(secrets.randbelow(9 * 10**8) + 10**8)  # 9 digits: number sentinels stay < 10**15
_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_$.")
_MAX_SHAPES = 4096
# The exact text of a statement checked lately: an agent repeating one (a result-cache hit)
# skips even the shape's tokenisation (~1 us instead of ~50).
_MAX_EXACT = 1024
_exact: dict[tuple[str, ReadOnlyRules, int | None], CheckedStatement] = {}
_shapes: dict[tuple[str, ReadOnlyRules, int | None], _Template | None] = {}
_shapes_lock = threading.Lock()  # for writers; readers need none


def clear_caches() -> int:
    """Empty this process's statement caches (checked statements and shape templates); they
    refill on demand. Returns how many entries were dropped (admin_flush_cache)."""
    with _shapes_lock:
        dropped = len(_shapes) + _check_cached.cache_info().currsize
        _shapes.clear()
        _check_cached.cache_clear()
    return dropped


@dataclass(frozen=True)
class _Template:
    parts: tuple[str, ...]  # regenerated text between the literal slots (one more than slots)
    order: tuple[int, ...]  # which literal of the statement fills each slot, in text order
    kind: str

    def fill(self, values: list[str]) -> str:
        out = [self.parts[0]]
        for slot, index in enumerate(self.order):
            out.append(values[index])
            out.append(self.parts[slot + 1])
        return "".join(out)


def _is_row_count(tokens: list[Token], i: int) -> bool:
    before = tokens[i - 1].text.upper() if i else ""
    if before in _ROW_COUNT_WORDS:
        return True
    # MySQL's LIMIT offset, count
    return before == "," and i >= 3 and tokens[i - 3].text.upper() == "LIMIT"


def _shape_of(sql: str, dialect: str) -> tuple[str, list[str], str] | None:
    """(the text with plain literals masked, their values, their kinds "N"/"S"), or None when
    the statement has no plain literal."""
    tokens = _tokenize(sql, dialect)
    pieces: list[str] = []
    values: list[str] = []
    kinds: list[str] = []
    position = 0
    for i, token in enumerate(tokens):
        text = token.text
        if token.token_type is TokenType.NUMBER:
            if not _PLAIN_NUMBER.match(text) or sql[token.start : token.end + 1] != text or _is_row_count(tokens, i):
                continue
            kind = "N"
        elif token.token_type is TokenType.STRING:
            if not _PLAIN_STRING.match(text) or "/*" in text or sql[token.start : token.end + 1] != f"'{text}'":
                continue
            kind = "S"
        else:
            continue
        pieces += (sql[position : token.start], "\x00", kind)
        values.append(text)
        kinds.append(kind)
        position = token.end + 1
    if not values:
        return None
    pieces.append(sql[position:])
    return "".join(pieces), values, "".join(kinds)


def _check_by_shape(sql: str, rules: ReadOnlyRules, row_cap: int | None) -> CheckedStatement | None:
    """The checked statement from its shape's template; None sends it to the full check."""
    dialect = rules.dialect
    if "\x00" in sql or _NONCE in sql or _MAYBE_EXPLAIN.search(sql):
        return None  # NUL is refused by the full check; EXPLAIN carries a prefix of its own
    if rules.show_setting and sql.lstrip()[:4].upper() == "SHOW":
        return None
    try:
        shape = _shape_of(sql, dialect)
    except SqlglotError:
        return None  # the full check refuses it with its reason
    if shape is None:
        return None
    masked, values, kinds = shape
    key = (masked, rules, row_cap)
    template = _shapes.get(key, _shapes)  # _shapes itself marks "never seen"
    if template is _shapes:
        checked = _check_cached(sql, rules, row_cap)  # a refusal raises: nothing is learnt
        template = _learn(masked, values, kinds, sql, rules, row_cap, checked)
        with _shapes_lock:
            if len(_shapes) >= _MAX_SHAPES:
                del _shapes[next(iter(_shapes))]  # the oldest
            _shapes[key] = template
        return checked
    if template is None:
        return None
    return CheckedStatement(sql=template.fill(values), kind=template.kind, dialect=dialect)


def _sentinel(kind: str, index: int) -> str:
    return f"{_NONCE}{index:06d}" if kind == "N" else f"zq{_NONCE}s{index:06d}"


def _learn(
    masked: str, values: list[str], kinds: str, sql: str, rules: ReadOnlyRules, row_cap: int | None, checked: CheckedStatement
) -> _Template | None:
    """The shape's template from a sentinel run, or None when any of its proofs fails."""
    dialect = rules.dialect
    pieces = masked.split("\x00")
    sentinels = [_sentinel(kind, i) for i, kind in enumerate(kinds)]
    sentinel_sql = pieces[0] + "".join(
        (s if kind == "N" else f"'{s}'") + piece[1:] for s, kind, piece in zip(sentinels, kinds, pieces[1:], strict=True)
    )
    types = [t.token_type for t in _tokenize(sql, dialect)]
    if [t.token_type for t in _tokenize(sentinel_sql, dialect)] != types:
        return None
    try:
        reference = _check_cached.__wrapped__(sentinel_sql, rules, row_cap)
    except Exception:  # noqa: BLE001 - refused or a sqlglot bug: this shape takes the full check
        return None
    text = reference.sql
    found: list[tuple[int, int]] = []  # (position, literal index)
    for index, (s, kind) in enumerate(zip(sentinels, kinds, strict=True)):
        at = text.find(s)
        if at < 0 or text.find(s, at + 1) >= 0:
            return None
        before, after = text[at - 1 : at], text[at + len(s) : at + len(s) + 1]
        if kind == "S" and (before, after) != ("'", "'"):
            return None
        if kind == "N" and (before in _WORD_CHARS or after in _WORD_CHARS):
            return None
        found.append((at, index))
    found.sort()
    parts, position = [], 0
    for at, index in found:
        parts.append(text[position:at])
        position = at + len(sentinels[index])
    parts.append(text[position:])
    template = _Template(parts=tuple(parts), order=tuple(index for _, index in found), kind=reference.kind)
    if template.kind != checked.kind or template.fill(values) != checked.sql:
        return None
    return template


# -- caller expressions for the sampling tools ---------------------------------------------------

_FRAGMENTS = {
    "column": ("SELECT {}", {"expressions"}),
    "where": ("SELECT 1 WHERE {}", {"expressions", "where"}),
    "order_by": ("SELECT 1 ORDER BY {}", {"expressions", "order"}),
}


def parse_fragment(text: str, kind: str, dialect: str) -> Any:
    """Parse a caller's expression on its own; anything beyond one clause is refused.

    The text is wrapped only to be parsed: what runs is regenerated from the parsed nodes."""
    template, allowed = _FRAGMENTS[kind]
    try:
        tokenizer, parser = _tools(dialect)
        wrapped = template.format(text)
        statements = [s for s in parser.parse(tokenizer.tokenize(wrapped), wrapped) if s is not None]
    except Exception:  # noqa: BLE001 - SqlglotError, or a sqlglot bug on odd input: fail closed
        raise InvalidArgument(f"{kind} could not be parsed as an SQL expression") from None
    tree = statements[0] if len(statements) == 1 else None
    if not isinstance(tree, exp.Select) or {k for k, v in tree.args.items() if v and k not in allowed}:
        raise InvalidArgument(f"{kind} must be a single expression, not a statement or extra clauses")
    check_tree(tree, _RULES_OF_DIALECT[dialect])
    if kind == "column":
        if len(tree.expressions) != 1:
            raise InvalidArgument("each entry of columns must be one expression")
        return tree.expressions[0]
    if kind == "where":
        return tree.args["where"].this
    return tree.args["order"].expressions


def table_ref(table: str, schema: str | None) -> exp.Table:
    return exp.Table(this=exp.to_identifier(table, quoted=True), db=exp.to_identifier(schema, quoted=True) if schema else None)
