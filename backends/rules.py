"""MCP query rules: ProxySQL's query-rule engine for the SQL tools of /mcp/query.

Admins edit `mcp_query_rules` (ProxySQL's 18 columns, and its `cache_ttl`) and `LOAD MCP QUERY RULES TO RUNTIME`;
`build_query_rules` validates every row first (a regex that does not compile, an unknown
re_modifier, a replace_pattern with no match_pattern... refuses the whole LOAD with
ConfigError and nothing changes).

Evaluation (`RuleSet.evaluate`), as ProxySQL does it: active rules in rule_id order whose
flagIN equals the current flag (0 at the start); username (the db_username of the resolved
auth profile), target_id, schemaname and tool_name must equal the call's when set (NULL or ''
matches anything); match_pattern is searched in the SQL as rewritten so far, negated by
negate_match_pattern. A match counts a hit and its actions accumulate: replace_pattern
rewrites (first match, or all with re_modifiers GLOBAL), timeout_ms lowers the statement
timeout, cache_ttl sets how long the result is cached (the last matching rule that sets it
wins; 0 never caches), error_msg blocks the call, OK_msg answers it without running anything,
log logs it, flagOUT switches the flag for the rules after it, and apply=1 stops evaluation. Rewritten
SQL then goes through the read-only checks like any other statement.

Hits are counted per worker in memory and merged into stats_mcp_query_rules(rule_id,
username, target_id, hits) at most once a second.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway import sqlite
from gateway.call import Caller
from gateway.errors import ConfigError
from gateway.store import ConfigModule
from gateway.variables import Variable

COLUMNS = (
    "rule_id", "active", "username", "target_id", "schemaname", "tool_name", "match_pattern",
    "negate_match_pattern", "re_modifiers", "flagIN", "flagOUT", "replace_pattern", "timeout_ms",
    "error_msg", "OK_msg", "log", "apply", "comment", "cache_ttl", "caller",
)  # fmt: skip
MODIFIERS = {"CASELESS", "GLOBAL"}
FLUSH_INTERVAL_S = 1.0


@dataclass(frozen=True)
class Rule:
    rule_id: int
    username: str | None
    target_id: str | None
    schemaname: str | None
    tool_name: str | None
    caller: str | None  # an OAuth caller's subject, or claim=value
    pattern: re.Pattern[str] | None
    negate: bool
    replace: str | None
    replace_all: bool
    flag_in: int
    flag_out: int | None
    timeout_ms: int | None
    error_msg: str | None
    ok_msg: str | None
    log: bool | None
    apply: bool
    cache_ttl: int | None = None  # ms a matched statement's result is cached; 0: never; None: no say


@dataclass
class RuleOutcome:
    sql: str
    matched: list[int] = field(default_factory=list)
    timeout_ms: int | None = None
    cache_ttl: int | None = None  # the last matching rule's that sets one
    error_msg: str | None = None
    ok_msg: str | None = None
    log: bool = False
    error_rule: int | None = None


def _opt_text(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _flag(row: Mapping[str, Any], column: str, where: str, errors: list[str], *, nullable: bool = True) -> int | None:
    value = row.get(column)
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        errors.append(f"{where}: {column} must be a non-negative integer{' or NULL' if nullable else ''}, got {value!r}")
        return None
    return value


def compile_rule(row: Mapping[str, Any], errors: list[str]) -> Rule | None:
    """Validate one row; append problems to errors. Returns the compiled rule when valid."""
    where = f"mcp_query_rules rule_id={row.get('rule_id')!r}"
    before = len(errors)
    rule_id = _flag(row, "rule_id", where, errors, nullable=False)
    for column in ("active", "negate_match_pattern", "apply", "log"):
        value = row.get(column)
        if not (value in (0, 1) or (value is None and column == "log")):
            errors.append(f"{where}: {column} must be 0 or 1, got {value!r}")
    flag_in = _flag(row, "flagIN", where, errors, nullable=False) or 0
    flag_out = _flag(row, "flagOUT", where, errors)
    timeout_ms = _flag(row, "timeout_ms", where, errors)
    if timeout_ms == 0:
        errors.append(f"{where}: timeout_ms must be at least 1 (or NULL)")
    cache_ttl = _flag(row, "cache_ttl", where, errors)
    modifiers = {m.strip().upper() for m in str(row.get("re_modifiers") or "").split(",") if m.strip()}
    if modifiers - MODIFIERS:
        errors.append(f"{where}: re_modifiers may only contain {', '.join(sorted(MODIFIERS))}, got {row.get('re_modifiers')!r}")
    match_pattern = _opt_text(row.get("match_pattern"))
    pattern = None
    if match_pattern is not None:
        try:
            pattern = re.compile(match_pattern, re.IGNORECASE if "CASELESS" in modifiers else 0)
        except re.error as exc:
            errors.append(f"{where}: match_pattern is not a valid regular expression ({exc})")
    replace = row.get("replace_pattern")
    if replace is not None:
        if match_pattern is None:
            errors.append(f"{where}: replace_pattern needs a match_pattern")
        elif pattern is not None:
            try:
                # Checks escapes and group references without needing a matching string.
                re._parser.parse_template(str(replace), pattern)  # type: ignore[attr-defined]
            except (re.error, IndexError) as exc:
                errors.append(f"{where}: replace_pattern is not a valid replacement ({exc})")
    if row.get("error_msg") and row.get("OK_msg"):
        errors.append(f"{where}: set error_msg or OK_msg, not both")
    if len(errors) > before or rule_id is None:
        return None
    return Rule(
        rule_id=rule_id,
        username=_opt_text(row.get("username")),
        target_id=_opt_text(row.get("target_id")),
        schemaname=_opt_text(row.get("schemaname")),
        tool_name=_opt_text(row.get("tool_name")),
        caller=_opt_text(row.get("caller")),
        pattern=pattern,
        negate=bool(row.get("negate_match_pattern")),
        replace=None if replace is None else str(replace),
        replace_all="GLOBAL" in modifiers,
        flag_in=flag_in,
        flag_out=flag_out,
        timeout_ms=timeout_ms,
        cache_ttl=cache_ttl,
        error_msg=_opt_text(row.get("error_msg")),
        ok_msg=_opt_text(row.get("OK_msg")),
        log=None if row.get("log") is None else bool(row.get("log")),
        apply=bool(row.get("apply")),
    )


def build_query_rules(
    memory: Mapping[str, list[dict[str, Any]]], _variables: Mapping[str, Variable]
) -> dict[str, list[dict[str, Any]]]:
    """ConfigModule.build for MCP QUERY RULES: every row must compile, else nothing changes."""
    errors: list[str] = []
    rows = memory["mcp_query_rules"]
    for row in rows:
        compile_rule(row, errors)
    if errors:
        raise ConfigError("; ".join(errors), details=errors)
    return {"runtime_mcp_query_rules": [{c: row.get(c) for c in COLUMNS} for row in rows]}


QUERY_RULES_MODULE = ConfigModule("MCP QUERY RULES", ("mcp_query_rules",), build_query_rules)


class RuleSet:
    """The compiled active rules of one runtime snapshot."""

    def __init__(self, rules: list[Rule]) -> None:
        self.rules = sorted(rules, key=lambda r: r.rule_id)
        self.caches = any(rule.cache_ttl for rule in rules)  # some rule can turn the result cache on

    @classmethod
    def from_rows(cls, rows: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> RuleSet:
        errors: list[str] = []
        compiled = [compile_rule(row, errors) for row in rows if row.get("active")]
        return cls([r for r in compiled if r is not None])  # runtime rows were validated at LOAD

    def evaluate(
        self, *, sql: str, username: str, target_id: str, schemaname: str, tool_name: str, caller: Caller | None = None
    ) -> RuleOutcome:
        outcome = RuleOutcome(sql=sql)
        flag = 0
        call = {"username": username, "target_id": target_id, "schemaname": schemaname, "tool_name": tool_name}
        for rule in self.rules:
            if rule.flag_in != flag:
                continue
            if any(getattr(rule, key) is not None and getattr(rule, key) != value for key, value in call.items()):
                continue
            if rule.caller is not None and not caller_matches(rule.caller, caller):
                continue
            if rule.pattern is not None and bool(rule.pattern.search(outcome.sql)) == rule.negate:
                continue
            outcome.matched.append(rule.rule_id)
            if rule.replace is not None and rule.pattern is not None:
                outcome.sql = rule.pattern.sub(rule.replace, outcome.sql, count=0 if rule.replace_all else 1)
            if rule.timeout_ms is not None:
                outcome.timeout_ms = min(outcome.timeout_ms or rule.timeout_ms, rule.timeout_ms)
            if rule.cache_ttl is not None:
                outcome.cache_ttl = rule.cache_ttl
            if rule.error_msg is not None:
                outcome.error_msg, outcome.error_rule = rule.error_msg, rule.rule_id
            if rule.ok_msg is not None:
                outcome.ok_msg = rule.ok_msg
            if rule.log is not None:
                outcome.log = rule.log
            if rule.flag_out is not None:
                flag = rule.flag_out
            if rule.apply:
                break
        return outcome


def caller_matches(wanted: str, caller: Caller | None) -> bool:
    """A rule's `caller` column against the call's caller (gateway.call.Caller.matches)."""
    return caller is not None and caller.matches(wanted)


class RuleHits:
    """Per-worker hit counters, merged into stats_mcp_query_rules at most once a second."""

    def __init__(self, *, flush_interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.flush_interval_s = flush_interval_s
        self._pending: dict[tuple[int, str, str], int] = {}
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()

    def count(self, rule_ids: list[int], *, username: str, target_id: str) -> None:
        with self._lock:
            for rule_id in rule_ids:
                key = (rule_id, username, target_id)
                self._pending[key] = self._pending.get(key, 0) + 1

    def due(self) -> bool:
        return bool(self._pending) and time.monotonic() - self._last_flush >= self.flush_interval_s

    def flush(self, store: Any) -> int:
        with self._lock:
            pending, self._pending = self._pending, {}
            self._last_flush = time.monotonic()
        if not pending:
            return 0
        conn = store.conn()
        with sqlite.transaction(conn):
            for (rule_id, username, target_id), hits in pending.items():
                conn.execute(
                    "INSERT INTO stats_mcp_query_rules (rule_id, username, target_id, hits) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (rule_id, username, target_id) DO UPDATE SET hits = hits + excluded.hits",
                    (rule_id, username, target_id, hits),
                )
        return len(pending)
