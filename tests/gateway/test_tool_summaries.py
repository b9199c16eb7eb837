"""The one-line summaries of tools (README table, `mcp-gateway tools`) are whole first sentences.

A summary used to be the text before the first ". ", which cut "(SELECT, WITH ... SELECT, ...)"
after "WITH ." and "chunks embedded vs. reused" after "vs.". A sentence ends at a period
followed by a space (or the end) outside parentheses and quotes, not in an ellipsis and not
after an abbreviation.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from server_process import REPO_ROOT

from gateway.assembly import handler_classes
from gateway.tools import first_sentence

ABBREVIATIONS = ("e.g.", "i.e.", "vs.", "etc.", "cf.", "approx.", "..")


def _tools_table() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "tools"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    rows = {}
    for line in out.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if len(cells) == 4 and cells[1].startswith("`"):
            rows[cells[1].strip("`")] = cells[3]
    return rows


def test_the_tools_table_prints_whole_first_sentences() -> None:
    rows = _tools_table()
    if "run_sql_readonly" in rows:
        assert rows["run_sql_readonly"] == (
            "Run one read-only SQL statement (SELECT, WITH ... SELECT, SHOW, DESCRIBE or plain EXPLAIN) on a target."
        )
    if "rag.admin.jobs" in rows:
        assert "chunks embedded vs. reused" in rows["rag.admin.jobs"], rows["rag.admin.jobs"]
    descriptions = {spec.name: " ".join(spec.description.split()) for cls in handler_classes() for spec in cls.tools.values()}
    assert set(rows) == set(descriptions)
    for name, summary in rows.items():
        assert summary.endswith((".", "?", "!")), (name, summary)
        assert not summary.endswith(ABBREVIATIONS) or summary == descriptions[name], (name, summary)
        assert summary.count("(") == summary.count(")"), (name, summary)
        assert summary.count('"') % 2 == 0 and summary.count("`") % 2 == 0, (name, summary)
        assert descriptions[name].startswith(summary.rstrip(".")), (name, summary)


@pytest.mark.parametrize(
    ("text", "sentence"),
    [
        ("Run one statement (SELECT, WITH ... SELECT). More here.", "Run one statement (SELECT, WITH ... SELECT)."),
        ("Counts embedded vs. reused chunks. Then more.", "Counts embedded vs. reused chunks."),
        ("Values, e.g. 5 or 6, are fine. Next.", "Values, e.g. 5 or 6, are fine."),
        ("Ends at the end", "Ends at the end."),
        ('Quotes "like. this" stay whole. Next.', 'Quotes "like. this" stay whole.'),
        ("Nested (a (b. c) d). Next.", "Nested (a (b. c) d)."),
        ("First line\nwraps here. Second.", "First line wraps here."),
        ("Paragraph one\n\nParagraph two.", "Paragraph one."),
        ("Is it up? Then go.", "Is it up?"),
        ("Version 2.5 of it. Next.", "Version 2.5 of it."),
    ],
)
def test_first_sentence(text: str, sentence: str) -> None:
    assert first_sentence(text) == sentence
