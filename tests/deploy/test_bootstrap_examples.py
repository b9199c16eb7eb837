"""The commented examples of deploy/gateway.toml are valid: uncommented, the file loads to runtime
with the example target and RAG source in it (issue 29: the README pointed there for
`[[rag_sources]]`, which it did not have)."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest

from backends.retrieval.ingest.sources_config import SourceSpec
from gateway.startup import prepare

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_LINE = re.compile(r"^# ?((\[\[\w+\]\])|(\w+ = .*))$")


def uncommented(text: str) -> str:
    """Turn the commented table examples (`# [[table]]`, `# column = value`) into TOML."""
    return "\n".join(m.group(1) if (m := EXAMPLE_LINE.match(line)) else line for line in text.splitlines()) + "\n"


def test_the_commented_examples_of_the_bootstrap_file_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = uncommented((REPO / "deploy" / "gateway.toml").read_text())
    parsed = tomllib.loads(text)
    assert [row["name"] for row in parsed["rag_sources"]] == ["shop_products"], parsed.get("rag_sources")
    assert {row["target_id"] for row in parsed["mcp_target_profiles"]} == {"shop"}
    SourceSpec.from_row(parsed["rag_sources"][0])  # what LOAD RAG SOURCES checks, with its message
    for reference in re.findall(r'"env:([A-Z_]+)"', text):
        monkeypatch.setenv(reference, "secret-from-the-environment")
    config = tmp_path / "gateway.toml"
    config.write_text(text.replace('host = "db.internal"', 'host = "127.0.0.1"'))  # no name lookup in CI
    runtime = prepare(tmp_path / "data", config_file=config, environ=os.environ).store.read_runtime()
    sources = {row["name"]: row for row in runtime.table("runtime_rag_sources")}
    assert sources["shop_products"]["watermark_column"] == "updated_at" and sources["shop_products"]["target_id"] == "shop"
