"""Layer 3 of read-only SQL: a sqlglot allowlist over the whole statement tree.

`check_readonly(sql, protocol)` accepts exactly one SELECT / WITH ... SELECT / set operation,
SHOW or DESCRIBE <table> (MySQL/MariaDB), or a plain EXPLAIN of a SELECT, and returns the
statement *regenerated* from the checked tree. The regenerated text is what runs, so a
parser differential (a comment, a MySQL `--` quirk, a token sqlglot silently dropped) cannot
smuggle anything past the check: what was checked is what executes. The regenerated text is
parsed and checked once more, so a generator quirk cannot produce an unchecked statement.

Refused anywhere in the tree: DML/DDL and writable CTEs, INTO (OUTFILE, DUMPFILE, @var,
a new table), locking clauses (FOR UPDATE/SHARE, LOCK IN SHARE MODE), SET/CALL/DO/PREPARE/
EXECUTE/HANDLER/LOCK and anything sqlglot only understands as an opaque `Command`, variable
assignment (`:=`), bind placeholders, and calls to the file, network, lock, sleep and admin
functions of DENIED_FUNCTIONS - at any node, including table functions in FROM. MySQL
conditional comments (`/*! */`, `/*M! */`) are refused on the raw text because MySQL
executes them. Anything that does not parse is refused (fail closed). The sampling tools'
`columns`, `where` and `order_by` go through `parse_fragment`: parsed alone, one clause only,
the same tree check, and rebuilt from nodes.

`current_setting()` is allowed: it only reads, and PostgreSQL itself hides the sensitive
settings (data_directory, ...) from roles without pg_read_all_settings.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from dataclasses import dataclass
from typing import Any

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError
from sqlglot.parser import Parser
from sqlglot.tokens import Token, Tokenizer

from gateway.errors import InvalidArgument

DIALECTS = {"mysql": "mysql", "pgsql": "postgres", "sqlite": "sqlite"}

# Exact names (lower case) refused wherever they are called.
DENIED_FUNCTIONS = frozenset(
    {
        # PostgreSQL: server files, large objects, other connections, settings, signals, sleep
        "pg_read_file", "pg_read_binary_file", "pg_ls_dir", "pg_stat_file", "pg_current_logfile",
        "lo_import", "lo_export", "lo_open", "lo_close", "loread", "lowrite", "lo_get", "lo_put",
        "lo_from_bytea", "lo_create", "lo_creat", "lo_unlink", "lo_truncate", "lo_lseek", "lo_tell",
        "pg_terminate_backend", "pg_cancel_backend", "pg_reload_conf", "pg_rotate_logfile",
        "pg_promote", "pg_switch_wal", "pg_create_restore_point", "pg_backup_start", "pg_backup_stop",
        "pg_start_backup", "pg_stop_backup", "pg_notify", "set_config", "pg_import_system_collations",
        "query_to_xml", "query_to_xml_and_xmlschema", "query_to_xmlschema", "cursor_to_xml",
        "cursor_to_xmlschema", "table_to_xml", "table_to_xml_and_xmlschema", "schema_to_xml",
        "database_to_xml", "database_to_xml_and_xmlschema", "nextval", "setval", "txid_current",
        "pg_current_xact_id", "pg_log_backend_memory_contexts", "pg_file_write", "pg_file_rename",
        "pg_file_unlink", "pg_logdir_ls",
        # MySQL / MariaDB: files, sleep, locks, replication waits, known UDF backdoors
        "load_file", "sleep", "benchmark", "get_lock", "release_lock", "release_all_locks",
        "is_free_lock", "is_used_lock", "master_pos_wait", "source_pos_wait", "master_gtid_wait",
        "wait_for_executed_gtid_set", "wait_until_sql_thread_after_gtids", "sys_exec", "sys_eval",
        "sys_get", "sys_set", "lib_mysqludf_sys_info",
        # SQLite: extensions and the fileio / zipfile helpers of the sqlite3 shell
        "load_extension", "readfile", "writefile", "edit", "fsdir", "zipfile", "sqlar_compress",
        "sqlar_uncompress", "fts3_tokenizer", "lsmode",
    }
)  # fmt: skip
# Families refused by prefix: every pg_sleep*, dblink*, advisory lock, replication slot, ...
DENIED_PREFIXES = (
    "pg_sleep", "dblink", "pg_advisory", "pg_try_advisory", "pg_ls_", "pg_read_", "pg_file",
    "pg_logical_", "pg_replication_", "pg_create_", "pg_drop_", "pg_copy_", "pg_wal_replay",
    "lo_", "sqlar_",
)  # fmt: skip
# Catalogs that hold credentials; reading them needs no write, so the engine would allow it.
DENIED_TABLES = frozenset({"pg_authid", "pg_shadow", "pg_user_mapping", "pg_user_mappings"})
DENIED_TABLE_SCHEMAS = frozenset({"mysql"})  # mysql.user, mysql.global_priv: password hashes

_DENIED_NODE_NAMES = (
    "Insert", "Update", "Delete", "Merge", "Create", "Drop", "Alter", "TruncateTable", "Command",
    "Into", "Lock", "Set", "SetItem", "Copy", "Transaction", "Commit", "Rollback", "Use", "Pragma",
    "Attach", "Detach", "LoadData", "Grant", "Revoke", "Kill", "Analyze", "Placeholder",
    "PropertyEQ", "Cache", "Uncache", "Refresh", "Execute", "Call", "Summarize", "Returning",
)  # fmt: skip
DENIED_NODES: tuple[type[exp.Expression], ...] = tuple(getattr(exp, n) for n in _DENIED_NODE_NAMES if hasattr(exp, n))
QUERY_ROOTS: tuple[type[exp.Expression], ...] = (exp.Select, exp.SetOperation, exp.Subquery)

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
    tree: exp.Expression | None  # the checked tree (None for PostgreSQL SHOW)
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


def dialect_of(protocol: str) -> str:
    try:
        return DIALECTS[protocol]
    except KeyError:
        raise InvalidArgument(f"unknown protocol {protocol!r}") from None


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


def check_tree(tree: exp.Expression) -> None:
    """Walk every node: refuse write/lock/session nodes and denied functions wherever they are."""
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
        if role == _TABLE:
            name = str(node.name).lower()
            if _denied_function(name):
                raise refuse(f"table function {name} is not allowed")
            if name in DENIED_TABLES or str(node.db).lower() in DENIED_TABLE_SCHEMAS:
                raise refuse(f"the credential catalog {node.sql()} is not readable through the gateway")


def _parse_one(sql: str, dialect: str) -> exp.Expression:
    tokenizer, parser = _tools(dialect)
    try:
        statements = [s for s in parser.parse(tokenizer.tokenize(sql), sql) if s is not None]
    except SqlglotError:
        raise refuse("the statement could not be parsed (unknown syntax is refused)") from None
    if len(statements) != 1:
        raise refuse(f"exactly one statement per call, got {len(statements)}")
    return statements[0]


def _root_kind(tree: exp.Expression, dialect: str) -> str:
    if isinstance(tree, QUERY_ROOTS):
        return "select"
    if isinstance(tree, exp.Show) and dialect == "mysql":
        return "show"
    if isinstance(tree, exp.Describe) and dialect == "mysql":
        extra = {k for k, v in tree.args.items() if v and k not in ("this", "as_json")}
        if isinstance(tree.this, exp.Table) and not extra:
            return "describe"
        raise refuse("only plain EXPLAIN/DESCRIBE is accepted (EXPLAIN ANALYZE runs the statement; see explain_sql)")
    raise refuse(f"{type(tree).__name__.upper()} statements are not read-only")


def _explain_inner(sql: str, dialect: str) -> tuple[str, str] | None:
    """For `EXPLAIN <query>`: (prefix to run, inner query text); None when not an EXPLAIN."""
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
    if dialect == "sqlite" and first == "QUERY" and len(tokens) > 2 and tokens[1].text.upper() == "PLAN":
        return "EXPLAIN QUERY PLAN ", rest[tokens[2].start :]
    if first in ("SELECT", "WITH") or (first == "(" and dialect != "postgres"):
        return "EXPLAIN ", rest[tokens[0].start :]
    if (
        dialect == "mysql"
        and tokens[0].token_type.name in ("VAR", "IDENTIFIER")
        and first not in ("ANALYZE", "EXTENDED", "PARTITIONS", "FORMAT")
    ):
        return None  # DESCRIBE <table>: the parser handles it
    raise refuse("only plain EXPLAIN of a SELECT is accepted (no ANALYZE, options or other statements)")


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
        if isinstance(count, exp.Literal) and not count.is_string and options is not None and not options.args.get("percent"):
            if int(count.this) > row_cap:
                limit.set("count", exp.Literal.number(row_cap))
            return tree
        raise refuse("FETCH FIRST must give a number of rows")
    current = limit.expression if isinstance(limit, exp.Limit) else None
    if isinstance(current, exp.Literal) and not current.is_string and int(current.this) <= row_cap:
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
    return isinstance(value, exp.Literal) and not value.is_string and int(value.this) <= row_cap


def check_readonly(sql: str, protocol: str, *, row_cap: int | None = None) -> CheckedStatement:
    """Accept one read-only statement and return the text to run, or raise InvalidArgument.

    Results are cached by (sql, protocol, row_cap): agents repeat statements, and a parse
    costs a few hundred microseconds. Refusals are not cached (they raise)."""
    try:
        return _check_cached(sql, protocol, row_cap)
    except InvalidArgument:
        raise
    except Exception:  # a sqlglot bug on odd input (IndexError, RecursionError...): fail closed
        log.info("sqlglot failed on a statement; refused", exc_info=True)
        raise refuse("the statement could not be parsed (unknown syntax is refused)") from None


@functools.lru_cache(maxsize=2048)
def _check_cached(sql: str, protocol: str, row_cap: int | None) -> CheckedStatement:
    dialect = dialect_of(protocol)
    if "\x00" in sql:
        raise refuse("NUL bytes are not allowed")
    if _CONDITIONAL_COMMENT.search(sql):
        raise refuse("MySQL conditional comments and optimizer hints (/*! */, /*M! */, /*+ */) are not allowed")
    if dialect == "postgres" and sql.lstrip().upper().startswith("SHOW"):
        match = _PG_SHOW.match(sql)
        if not match:
            raise refuse("SHOW takes one setting name")
        return CheckedStatement(sql=f"SHOW {match.group(1)}", kind="show", tree=None, dialect=dialect)
    explain = _explain_inner(sql, dialect)
    prefix, body = explain if explain else ("", sql)
    tree = _parse_one(body, dialect)
    while isinstance(tree, exp.Subquery) and isinstance(tree.this, exp.Query) and not tree.args.get("limit"):
        tree = tree.this  # (SELECT ...) at the top: the parentheses add nothing, and hide the LIMIT
    kind = _root_kind(tree, dialect)
    if explain and kind != "select":
        raise refuse("EXPLAIN takes a SELECT")
    check_tree(tree)
    if row_cap is not None and not explain:
        tree = cap_rows(tree, row_cap)
    # copy=False: the tree is ours, and copying it cost more than parsing it.
    text = _dialect(dialect).generate(tree, copy=False, comments=False)
    # What runs is checked too: the generated text must parse to one statement that passes,
    # with the row cap still on the outer query (`FROM SELECT 1` + LIMIT re-binds it inside).
    again = _parse_one(text, dialect)
    _root_kind(again, dialect)
    check_tree(again)
    if row_cap is not None and not explain and not _capped(again, row_cap):
        raise refuse("the row cap would not apply to the outer query; write the statement in plain form")
    return CheckedStatement(sql=prefix + text, kind="explain" if explain else kind, tree=tree, dialect=dialect)


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
    check_tree(tree)
    if kind == "column":
        if len(tree.expressions) != 1:
            raise InvalidArgument("each entry of columns must be one expression")
        return tree.expressions[0]
    if kind == "where":
        return tree.args["where"].this
    return tree.args["order"].expressions


def table_ref(table: str, schema: str | None) -> exp.Table:
    return exp.Table(this=exp.to_identifier(table, quoted=True), db=exp.to_identifier(schema, quoted=True) if schema else None)
