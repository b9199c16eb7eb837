"""What the /mcp/ai tools say to the model, and how they read its answers. Pure functions.

The schema context is bounded in tokens (estimated at 4 characters a token, the usual rule for
English and SQL with BPE tokenizers): tables are listed whole, most relevant first (names that
share words with the question), until the budget is spent; the context says how many were left
out. Nothing secret goes in: table and column names, types, keys and comments only — never a
connection string, a password or a token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

CHARS_PER_TOKEN = 4
_FENCE = re.compile(r"```(?:sql|SQL|postgresql|mysql|sqlite)?\s*\n(?P<body>.*?)```", re.S)
_STATEMENT_START = re.compile(r"(?is)\bselect\b|\bwith\s+(?:recursive\s+)?\w+\s*(?:\([^)]*\)\s*)?as\s*\(")
_WORD = re.compile(r"[a-z0-9]+")

SQL_SYSTEM = (
    "You write one read-only SQL statement that answers the user's question about a {engine} database. "
    "Use only the tables and columns listed. Answer with the statement alone in a ```sql code block, no prose. "
    "Never write INSERT, UPDATE, DELETE, DDL, or more than one statement."
)
ANSWER_SYSTEM = (
    "You answer the user's question from the SQL result given, in one or two plain sentences. "
    "If the result is empty or cut (truncated), say so."
)
ANALYZE_SYSTEM = (
    "You are a database performance and data analyst. Explain the result or execution plan given, "
    "point out what matters (full scans, row estimates, skew, nulls), and answer the user's question if there is one."
)


@dataclass
class TableInfo:
    schema: str
    name: str
    columns: list[dict[str, Any]] = field(default_factory=list)  # name, type, key, nullable, comment
    comment: str = ""

    def render(self) -> str:
        cols = []
        for c in self.columns:
            text = f"{c['name']} {c.get('type') or ''}".strip()
            if c.get("key"):
                text += f" {c['key']}"
            if c.get("comment"):
                text += f" -- {c['comment']}"
            cols.append(text)
        head = f"TABLE {self.schema + '.' if self.schema else ''}{self.name}"
        if self.comment:
            head += f" -- {self.comment}"
        return head + " (\n  " + ",\n  ".join(cols) + "\n)"


def estimate_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def schema_context(tables: list[TableInfo], question: str, *, max_tokens: int) -> tuple[str, int, int]:
    """(context text, tables included, tables left out) within `max_tokens`."""
    words = set(_WORD.findall(question.lower()))

    def relevance(t: TableInfo) -> tuple[int, str]:
        names = set(_WORD.findall(t.name.lower())) | {w.rstrip("s") for w in _WORD.findall(t.name.lower())}
        cols = {w for c in t.columns for w in _WORD.findall(str(c["name"]).lower())}
        return (-(3 * len(names & (words | {w.rstrip("s") for w in words})) + len(cols & words)), t.name)

    parts, used, budget = [], 0, max_tokens * CHARS_PER_TOKEN
    ordered = sorted(tables, key=relevance)
    for table in ordered:
        text = table.render()
        if used + len(text) + 2 > budget:
            continue
        parts.append(text)
        used += len(text) + 2
    left_out = len(tables) - len(parts)
    context = "\n\n".join(parts)
    if left_out:
        context += f"\n\n-- {left_out} more table(s) not shown (context budget)"
    return context, len(parts), left_out


def sql_messages(engine: str, context: str, question: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": SQL_SYSTEM.format(engine=engine)},
        {"role": "user", "content": f"Schema:\n{context}\n\nQuestion: {question}"},
    ]


def repair_message(sql: str, code: str, message: str) -> dict[str, str]:
    return {
        "role": "user",
        "content": f"That statement failed with {code}: {message}\nWrite a corrected statement, again alone in a ```sql block.",
    }


def extract_sql(reply: str) -> str | None:
    """The statement in a model's reply: the first fenced block, else text from the first SELECT/WITH."""
    match = _FENCE.search(reply)
    text = match["body"] if match else reply
    if not match:
        start = _STATEMENT_START.search(text)
        if start is None:
            return None
        text = text[start.start() :]
    text = text.strip().rstrip(";").strip()
    return text or None


def rows_preview(columns: list[str], rows: list[list[Any]], *, max_chars: int) -> str:
    """A result as tab-separated text for the model, cut at `max_chars` (and said so)."""
    lines = ["\t".join(columns)]
    size = len(lines[0])
    for index, row in enumerate(rows):
        line = "\t".join("NULL" if v is None else str(v) for v in row)
        if size + len(line) + 1 > max_chars:
            lines.append(f"... {len(rows) - index} more row(s) not shown")
            break
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)
