"""Turn one source row into a document, as `doc_map_json` says (RAG_POC's format).

    {"doc_id":   {"format": "posts:{Id}"},                       default "<table>:{pk}"
     "title":    {"concat": [{"col": "Title"}]},                 default: no title
     "body":     {"concat": [{"col": "Title"}, {"lit": "\n"}, {"col": "Body"}]},   required
     "metadata": {"pick": ["Tags", "Score"], "rename": {"Tags": "tags"}}}

A row that cannot make a document (empty body, text that is not UTF-8, a body over the
size cap) raises `BadRow`: the sync counts it with its key and goes on.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
import string
import uuid
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import ConfigError

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")
DEFAULT_MAX_DOC_CHARS = 2_000_000


class BadRow(Exception):
    """This row cannot become a document; `reason` is a stable code for the job's errors."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Part:
    col: str | None = None
    lit: str | None = None


@dataclass(frozen=True)
class DocMap:
    doc_id_format: str
    title: tuple[Part, ...]
    body: tuple[Part, ...]
    pick: tuple[str, ...] = ()
    rename: dict[str, str] = field(default_factory=dict)
    max_doc_chars: int = DEFAULT_MAX_DOC_CHARS

    @property
    def columns(self) -> set[str]:
        """Every source column the map reads (the reader selects only these, plus keys)."""
        cols = {p.col for p in (*self.title, *self.body) if p.col}
        cols.update(self.pick)
        cols.update(self.doc_id_columns)
        return cols

    @property
    def doc_id_columns(self) -> set[str]:
        return {name for _, name, _, _ in string.Formatter().parse(self.doc_id_format) if name}

    @classmethod
    def from_json(cls, raw: dict[str, Any] | None, *, table: str, pk_columns: tuple[str, ...]) -> DocMap:
        raw = dict(raw or {})
        unknown = set(raw) - {"doc_id", "title", "body", "metadata", "max_doc_chars"}
        if unknown:
            raise ConfigError(f"doc_map_json: unknown key(s) {', '.join(sorted(unknown))}")
        default_id = table.split(".")[-1] + ":" + ":".join("{" + pk + "}" for pk in pk_columns)
        doc_id_format = (raw.get("doc_id") or {}).get("format", default_id)
        if not isinstance(doc_id_format, str) or not doc_id_format:
            raise ConfigError("doc_map_json.doc_id.format must be a non-empty string")
        try:
            fields = [name for _, name, _, _ in string.Formatter().parse(doc_id_format) if name is not None]
        except ValueError as exc:
            raise ConfigError(f"doc_map_json.doc_id.format is not a valid template: {exc}") from None
        for name in fields:
            if not IDENTIFIER.match(name):
                raise ConfigError(f"doc_map_json.doc_id.format: {{{name}}} is not a column name")
        missing = [pk for pk in pk_columns if pk not in fields]
        if missing:
            # Two rows must never map to one document: the sync relies on doc_id being a key.
            raise ConfigError(f"doc_map_json.doc_id.format must use every primary key column; missing {', '.join(missing)}")
        if "body" not in raw:
            raise ConfigError("doc_map_json.body.concat is required (which columns make the document text)")
        metadata = raw.get("metadata") or {}
        pick = tuple(metadata.get("pick", ()))
        rename = dict(metadata.get("rename", {}))
        for col in (*pick, *rename):
            if not isinstance(col, str) or not IDENTIFIER.match(col):
                raise ConfigError(f"doc_map_json.metadata: {col!r} is not a column name")
        max_doc_chars = raw.get("max_doc_chars", DEFAULT_MAX_DOC_CHARS)
        if not isinstance(max_doc_chars, int) or max_doc_chars < 1:
            raise ConfigError("doc_map_json.max_doc_chars must be a positive integer")
        return cls(
            doc_id_format=doc_id_format,
            title=_parts(raw.get("title"), "title"),
            body=_parts(raw["body"], "body"),
            pick=pick,
            rename=rename,
            max_doc_chars=max_doc_chars,
        )

    # -- mapping ---------------------------------------------------------------------------
    def doc_id(self, row: dict[str, Any]) -> str:
        return self.doc_id_format.format_map({name: _text(row.get(name), name) for name in self.doc_id_columns})

    def map_row(self, row: dict[str, Any]) -> tuple[str, str, str, dict[str, Any]]:
        """(doc_id, title, body, metadata) of a row, or BadRow."""
        body = _concat(self.body, row)
        if not body.strip():
            raise BadRow("EMPTY_BODY", "the document body is empty or NULL")
        if len(body) > self.max_doc_chars:
            raise BadRow("OVERSIZE", f"the document body has {len(body)} characters; the cap is {self.max_doc_chars}")
        metadata = {self.rename.get(col, col): json_value(row.get(col), col) for col in self.pick}
        return self.doc_id(row), _concat(self.title, row), body, metadata


def _parts(raw: Any, where: str) -> tuple[Part, ...]:
    if raw is None:
        return ()
    concat = raw.get("concat") if isinstance(raw, dict) else None
    if not isinstance(concat, list):
        raise ConfigError(f"doc_map_json.{where} must be {{'concat': [{{'col': ...}} | {{'lit': ...}}, ...]}}")
    parts = []
    for item in concat:
        if isinstance(item, dict) and set(item) == {"col"} and isinstance(item["col"], str) and IDENTIFIER.match(item["col"]):
            parts.append(Part(col=item["col"]))
        elif isinstance(item, dict) and set(item) == {"lit"} and isinstance(item["lit"], str):
            parts.append(Part(lit=item["lit"]))
        else:
            raise ConfigError(f"doc_map_json.{where}.concat: {item!r} is neither {{'col': name}} nor {{'lit': text}}")
    return tuple(parts)


def _concat(parts: tuple[Part, ...], row: dict[str, Any]) -> str:
    return "".join(part.lit if part.col is None else _text(row.get(part.col), part.col) for part in parts)


def _text(value: Any, col: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise BadRow("UNDECODABLE", f"column {col} is not valid UTF-8 text") from None
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    return str(value)


def json_value(value: Any, col: str) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (dict, list)):
        return json.loads(json.dumps(value, default=str))
    if isinstance(value, uuid.UUID):
        return str(value)
    return _text(value, col)
