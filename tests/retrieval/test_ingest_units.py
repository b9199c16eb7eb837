"""Chunking, document mapping and rag_sources validation: pure functions, no database."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.retrieval.ingest.chunking import ChunkingSpec, chunk_text
from backends.retrieval.ingest.docmap import BadRow, DocMap
from backends.retrieval.ingest.sources_config import SourceSpec
from gateway.assembly import open_config
from gateway.errors import ConfigError


@settings(max_examples=60, deadline=None)
@given(text=st.text(alphabet=st.sampled_from("ab .\n"), max_size=3000), size=st.integers(40, 600), data=st.data())
def test_chunks_cover_the_text_in_order_with_bounded_sizes(text: str, size: int, data) -> None:
    overlap = data.draw(st.integers(0, size // 2))
    min_size = data.draw(st.integers(0, size))
    spec = ChunkingSpec(chunk_size=size, overlap=overlap, min_chunk_size=min_size)
    chunks = chunk_text(text, spec)
    if not text:
        assert chunks == []
        return
    assert chunks[0] == text[: len(chunks[0])] and text.endswith(chunks[-1])
    for chunk in chunks[:-1]:
        assert 0 < len(chunk) <= size
    assert len(chunks[-1]) <= size + max(min_size, 1)  # a short tail joined the last chunk
    assert chunk_text(text, spec) == chunks  # deterministic: unchanged text, unchanged hashes


def test_blueprint_defaults_and_token_chunking() -> None:
    assert ChunkingSpec.from_json({}) == ChunkingSpec("chars", 4000, 400, 800)
    text = "word " * 2000
    pieces = chunk_text(text, ChunkingSpec.from_json({"unit": "tokens", "chunk_size": 100, "overlap": 10, "min_chunk_size": 20}))
    assert len(pieces) > 5 and "".join(pieces).startswith(pieces[0])
    with pytest.raises(ConfigError):
        ChunkingSpec.from_json({"unit": "words"})
    with pytest.raises(ConfigError):
        ChunkingSpec.from_json({"chunk_size": 100, "overlap": 90})


def test_doc_map_builds_documents_and_rejects_bad_rows() -> None:
    doc_map = DocMap.from_json(
        {
            "doc_id": {"format": "posts:{Id}"},
            "title": {"concat": [{"col": "Title"}]},
            "body": {"concat": [{"col": "Title"}, {"lit": "\n"}, {"col": "Body"}]},
            "metadata": {"pick": ["Tags", "Score"], "rename": {"Tags": "tags"}},
            "max_doc_chars": 50,
        },
        table="posts",
        pk_columns=("Id",),
    )
    assert doc_map.map_row({"Id": 7, "Title": "Hi", "Body": b"there", "Tags": "<a>", "Score": 3}) == (
        "posts:7",
        "Hi",
        "Hi\nthere",
        {"tags": "<a>", "Score": 3},
    )
    for row, reason in (
        ({"Id": 1, "Title": None, "Body": None}, "EMPTY_BODY"),
        ({"Id": 2, "Title": "x", "Body": b"\xff\xfe"}, "UNDECODABLE"),
        ({"Id": 3, "Title": "x", "Body": "y" * 60}, "OVERSIZE"),
    ):
        with pytest.raises(BadRow) as caught:
            doc_map.map_row(row)
        assert caught.value.reason == reason
    default = DocMap.from_json({"body": {"concat": [{"col": "b"}]}}, table="db.t", pk_columns=("a", "b"))
    assert default.doc_id({"a": 1, "b": "x"}) == "t:1:x"
    with pytest.raises(ConfigError, match="every primary key"):
        DocMap.from_json({"doc_id": {"format": "t:{a}"}, "body": {"concat": [{"col": "b"}]}}, table="t", pk_columns=("a", "b"))


GOOD_SOURCE = {
    "source_id": 1,
    "name": "posts",
    "enabled": 1,
    "target_id": "maria",
    "table_name": "posts",
    "pk_column": "id",
    "watermark_column": "updated_at",
    "where_sql": "",
    "doc_map_json": json.dumps({"body": {"concat": [{"col": "body"}]}}),
    "chunking_json": "{}",
    "embedding_json": json.dumps({"batch_size": 32, "input": "{title}: {body}"}),
    "sync_interval_s": 0,
    "key_scan_interval_s": 0,
}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"table_name": "posts; DROP TABLE x"}, "table_name"),
        ({"pk_column": ""}, "pk_column"),
        ({"watermark_column": "updated at"}, "watermark_column"),
        ({"where_sql": "1=1; DELETE FROM posts"}, "where_sql"),
        ({"doc_map_json": "{not json"}, "doc_map_json"),
        ({"doc_map_json": json.dumps({"body": {"concat": [{"sql": "x"}]}})}, "concat"),
        ({"chunking_json": json.dumps({"chunk_size": 1})}, "chunk_size"),
        ({"embedding_json": json.dumps({"input": "{text}"})}, "input"),
        ({"embedding_json": json.dumps({"password": "x"})}, "unknown key"),
        ({"target_id": ""}, "target_id"),
        ({"sync_interval_s": -5}, "sync_interval_s"),
    ],
)
def test_source_validation_names_the_problem(change: dict, message: str) -> None:
    SourceSpec.from_row(GOOD_SOURCE)
    with pytest.raises(ConfigError, match=message):
        SourceSpec.from_row({**GOOD_SOURCE, **change})


def test_load_rag_sources_refuses_a_bad_row_and_changes_nothing(tmp_path) -> None:
    store = open_config(tmp_path)
    conn = store.conn()
    cols = list(GOOD_SOURCE)
    insert = f"INSERT INTO main.rag_sources ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    conn.execute(insert, list(GOOD_SOURCE.values()))
    store.load_to_runtime("RAG SOURCES")
    conn.execute(insert, list({**GOOD_SOURCE, "source_id": 2, "name": "broken", "chunking_json": '{"unit": "pages"}'}.values()))
    with pytest.raises(ConfigError, match="broken"):
        store.load_to_runtime("RAG SOURCES")
    assert [r[0] for r in conn.execute("SELECT name FROM runtime_rag_sources")] == ["posts"]
    store.save_to_disk("RAG SOURCES")
    assert conn.execute("SELECT count(*) FROM disk.rag_sources").fetchall()[0][0] == 2
