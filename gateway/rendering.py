"""The text block of a tool result: what the model reads, in as few tokens as it can afford.

`structuredContent` keeps the typed JSON for programs; the text block is a compact rendering of
the same answer (`text_of`):

- a result set (`columns` + `rows`): a header line of column names, one line per row with the
  values separated by tabs, and one closing line with the row count and `truncated` (and its
  reason, and a query rule's message). Column types and `stats` stay in structuredContent.
  Values: NULL for null, true/false, numbers as written, strings as they are with backslash,
  tab, newline and carriage return escaped (\\\\, \\t, \\n, \\r), anything nested as JSON.
- any other answer: one `key: value` line per field; a list of objects (a schema listing) as a
  table under its key, one line per object; nested values as JSON.

Errors keep their JSON text (`{"error": {code, message, details}}`): small, and parsed by
clients. `format="json"` (a tool argument where the tool declares it, or the mcp-text_format
variable) makes the text block the JSON of structuredContent, byte for byte, as before; so do
clients of protocol eras that predate structuredContent (before 2025-06-18), for whom the text
block is the only typed form.
"""

from __future__ import annotations

from itertools import repeat
from operator import itemgetter
from typing import Any

import orjson

TEXT_FORMATS = ("compact", "json")
# Protocol versions that know structuredContent (2025-06-18 and later sort after this one).
STRUCTURED_SINCE = "2025-06-18"

_SCALARS = frozenset({str, int, float, bool, type(None)})
_RESULT_SET_KEYS = frozenset({"target_id", "columns", "rows", "row_count", "truncated", "truncated_reason", "message", "stats"})


def json_text(payload: Any) -> str:
    return orjson.dumps(payload).decode()


def wants_json(text_format: str | None, protocol_version: str) -> bool:
    """JSON text when asked, or when the client's protocol era cannot see structuredContent."""
    if text_format == "json":
        return True
    return bool(protocol_version) and protocol_version < STRUCTURED_SINCE


def escape(text: str) -> str:
    """Backslash, tab, newline and carriage return escaped. Chained str.replace, each a C scan
    that copies nothing when the character is absent: str.translate with a table that maps to
    two characters goes character by character through a dict, ~2 us for a short metadata
    object and ~100 us for a whole RAG answer's cells (bench/rag_latency.py tools)."""
    if "\\" in text:
        text = text.replace("\\", "\\\\")  # first: the escapes below add backslashes
    if "\t" in text:
        text = text.replace("\t", "\\t")
    if "\n" in text:
        text = text.replace("\n", "\\n")
    if "\r" in text:
        text = text.replace("\r", "\\r")
    return text


def cell(value: Any) -> str:
    """One value on one line: strings escaped, nested values as JSON."""
    if value.__class__ is str:
        return escape(value)
    if value is None:
        return "NULL"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return escape(orjson.dumps(value).decode())


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    return ["\t".join(_cells(header)), *_rows_text(rows)]


def _rows_text(rows: list[list[Any]] | list[tuple[Any, ...]]) -> list[str]:
    """One line per row, `cell` of each value. A few rows go value by value; more go a column at
    a time: a column's values mostly share one type, so one C-level pass (`map`, `join`) renders
    the whole column instead of a Python expression per value (instructions per text: a 10-hit
    RAG search answer -47%, a 100-row result -38%; bench/README.md)."""
    if len(rows) < COLUMNS_FROM_ROWS or not rows[0] or len(set(map(len, rows))) != 1:  # few rows, no columns, ragged
        return _rows_by_value(rows)
    return list(map("\t".join, zip(*map(_cells, zip(*rows)))))


COLUMNS_FROM_ROWS = 4  # below, a column's setup (its types) costs more than its values


def _rows_by_value(rows: list[list[Any]] | list[tuple[Any, ...]]) -> list[str]:
    """Most values need no escape: they are written as they are, and the whole text is checked
    once (a tab, newline, carriage return or backslash beyond the layout's means some value
    needed one); only then is every value escaped one by one."""
    if not rows:
        return []
    lines = [
        "\t".join(
            [
                v
                if (kind := v.__class__) is str
                else "NULL"
                if v is None
                else repr(v)
                if kind is float or kind is int
                else cell(v)
                for v in row
            ]
        )
        for row in rows
    ]
    text = "\n".join(lines)
    tabs = sum(len(row) - 1 for row in rows if row)
    if text.count("\t") == tabs and text.count("\n") == len(rows) - 1 and "\\" not in text and "\r" not in text:
        return lines
    return ["\t".join([cell(v) for v in row]) for row in rows]


_NONE = type(None)
_PLAIN_NUMBERS = frozenset({int, float})
_NESTED = frozenset({dict, list})


def _needs_escape(text: str) -> bool:
    return "\\" in text or "\t" in text or "\n" in text or "\r" in text


def _cells(values: list[Any] | tuple[Any, ...]) -> list[str] | tuple[str, ...]:
    """`cell` of each value, by the one or two types the values have."""
    if values and values[0] is None and values.count(None) == len(values):  # a column nothing filled (no type call per value)
        return ("NULL",) * len(values)
    kinds = set(map(type, values))
    if len(kinds) == 1:
        (kind,) = kinds
        if kind is str:
            return list(map(escape, values)) if _needs_escape("".join(values)) else values
        if kind is float:
            return _floats(values)
        if kind is int:
            return list(map(repr, values))
    elif kinds <= _PLAIN_NUMBERS:
        return list(map(repr, values))
    elif kinds == {str, _NONE}:
        out = ["NULL" if v is None else v for v in values]
        return [cell(v) for v in values] if _needs_escape("".join(out)) else out
    if kinds <= _NESTED:  # objects and lists: their JSON, escaped
        out = list(map(bytes.decode, map(orjson.dumps, values)))
        return list(map(escape, out)) if _needs_escape("".join(out)) else out
    return [cell(v) for v in values]


def _floats(values: list[float] | tuple[float, ...]) -> list[str]:
    """repr of each float, written by orjson in one call: both write the shortest digits that read
    back as the same float, and both in positional notation from 1e-4 up to 1e16. A value outside
    (an exponent, or orjson's positional 0.0000x below 1e-4), nan or inf (null) takes repr. repr's
    digit search cost ~3,000 instructions a float, the largest single part of a RAG search
    answer's text; tests/gateway/test_rendering.py holds the two equal."""
    text = orjson.dumps(values).decode()
    if "e" in text or "n" in text or ".0000" in text:
        return list(map(repr, values))
    return text[1:-1].split(",")


def rows_footer(payload: dict[str, Any]) -> str:
    count = payload.get("row_count", len(payload["rows"]))
    text = f"{count} row{'' if count == 1 else 's'}; truncated: {'true' if payload.get('truncated') else 'false'}"
    if payload.get("truncated_reason"):
        text += f" ({payload['truncated_reason']})"
    return text


def result_set(payload: dict[str, Any]) -> list[str]:
    columns = payload["columns"]
    header = [c["name"] if isinstance(c, dict) else str(c) for c in columns]
    lines = table(header, payload["rows"]) if header else []
    lines.append(rows_footer(payload))
    if payload.get("message"):
        lines.append(f"message: {cell(payload['message'])}")
    for key, value in payload.items():  # what a richer result adds (explain_sql's plan)
        if key not in _RESULT_SET_KEYS and value is not None:
            lines.append(f"{key}: {cell(value)}")
    return lines


def _is_record_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(map(isinstance, value, repeat(dict)))


def _records(items: list[dict[str, Any]]) -> list[str]:
    """A list of objects as a table: the keys in order of first appearance, a missing one NULL."""
    keys = tuple(items[0])
    if len(keys) > 1 and len(set(map(len, items))) == 1:  # the usual case: every item has the same keys
        try:
            rows = list(map(itemgetter(*keys), items))  # a tuple of values per item
        except KeyError:  # as many keys, not the same ones
            pass
        else:
            return table(list(keys), rows)
    header = dict.fromkeys(keys)
    for item in items:
        if item.keys() != header.keys():
            header.update(dict.fromkeys(item))
    names = list(header)
    return table(names, [list(map(item.get, names)) for item in items])


def fields(payload: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for key, value in payload.items():
        if value.__class__ in _SCALARS:  # most fields: no list or object to look into
            lines.append(f"{key}: {cell(value)}")
        elif _is_record_list(value):
            lines.append(f"{key}: {len(value)}")
            lines.extend(_records(value))
        elif isinstance(value, dict) and "columns" in value and "rows" in value:
            lines.append(f"{key}:")
            lines.extend(result_set(value))
        else:
            lines.append(f"{key}: {cell(value)}")
    return lines


def compact_text(payload: Any) -> str:
    """The compact rendering of a successful tool answer (module docstring)."""
    if not isinstance(payload, dict):
        return cell(payload)
    if isinstance(payload.get("columns"), list) and isinstance(payload.get("rows"), list):
        return "\n".join(result_set(payload))
    return "\n".join(fields(payload))


def text_of(payload: Any, *, is_error: bool = False, text_format: str | None = None, protocol_version: str = "") -> str:
    if is_error or wants_json(text_format, protocol_version):
        return json_text(payload)
    return compact_text(payload)
