"""admin.upsert_rag_source describes every field it takes, and takes every rag_sources column
(issue 29: it described only name, target_id and comment; the user copied the demo's row)."""

from __future__ import annotations

from pathlib import Path

from gateway.assembly import open_config
from gateway.tools import _build_spec, declared_tools
from handlers.admin.config_edits import ConfigEditTools


def test_upsert_rag_source_describes_every_column(tmp_path: Path) -> None:
    (func, meta) = next((f, m) for f, m in declared_tools(ConfigEditTools) if m["name"] == "admin.upsert_rag_source")
    spec = _build_spec(func, meta, ConfigEditTools)
    properties = spec.input_schema["properties"]
    undescribed = [name for name, prop in properties.items() if len(prop.get("description", "")) < 10]
    assert not undescribed, undescribed
    columns = {row[1] for row in open_config(tmp_path).conn().execute("PRAGMA main.table_info(rag_sources)")}
    assert set(properties) == columns - {"source_id"}, set(properties) ^ (columns - {"source_id"})
    for word in ("concat", "body", "pick"):
        assert word in properties["doc_map_json"]["description"]
    for word in ("chunk_size", "overlap", "min_chunk_size", "unit"):
        assert word in properties["chunking_json"]["description"]
    assert "{title}" in properties["embedding_json"]["description"] and "cursor" in properties["watermark_column"]["description"]
