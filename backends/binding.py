"""Bound parameters of a custom SQL tool (backends/custom_tools.py): its statement's placeholders
become the driver's, and the caller's values go to the driver beside the text, never into it.

A custom tool's statement is stored with each `:name` placeholder replaced by a marker literal,
`'__mcp_param_<name>__'`: an ordinary string literal to the read-only check and the query rules,
which see the same text on every call (so the check is answered from its cache). Once checked,
`bind` replaces each marker in the text that runs with the engine's placeholder (`%s`, `$n`,
`?`; an array with one per item, NULL when empty) and lists the values in that order. No value
is ever part of the text, and an admin's statement cannot contain a marker (custom_tools
refuses it at LOAD), so only markers the gateway put there are replaced.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from backends.engines.base import Engine

MARKER_PREFIX = "__mcp_param_"
_MARKER = re.compile(r"'__mcp_param_([A-Za-z_][A-Za-z0-9_]{0,62})__'")


def marker(name: str) -> str:
    return f"'{MARKER_PREFIX}{name}__'"


@functools.lru_cache(maxsize=1024)
def _parts(sql: str, percent: bool) -> tuple[str, ...]:
    """The text between markers (even positions) and the markers' names (odd positions); with
    `percent` (pymysql formats the text with %), every literal % doubled."""
    parts = _MARKER.split(sql)
    if percent:
        parts = [part.replace("%", "%%") if i % 2 == 0 else part for i, part in enumerate(parts)]
    return tuple(parts)


def bind(sql: str, engine: Engine, params: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """(the text with the driver's placeholders, the values in their order)."""
    parts = _parts(sql, engine.bound_placeholder(1) == "%s")
    out: list[str] = []
    values: list[Any] = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            out.append(part)
            continue
        value = params[part]  # every marker's parameter was declared (checked at LOAD)
        if isinstance(value, (list, tuple)):
            if not value:
                out.append("NULL")  # IN (NULL): matches nothing, as an empty list should
                continue
            marks = []
            for item in value:
                values.append(item)
                marks.append(engine.bound_placeholder(len(values)))
            out.append(", ".join(marks))
        else:
            values.append(value)
            out.append(engine.bound_placeholder(len(values)))
    return "".join(out), values
