"""Every variable and every tool is documented in the README, generated from its declaration."""

from pathlib import Path

from gateway.cli import render_readme

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_tables_match_the_declarations():
    text = README.read_text()
    assert render_readme(text) == text, "README is stale: run `mcp-gateway docs` and commit README.md"
